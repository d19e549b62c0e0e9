"""The terminal shows steps, progress and the summary; library chatter (including output written
at the file-descriptor level, as Ray's C++ core does) goes to a log inside the artifact."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain import progress

REPO = Path(__file__).resolve().parents[2]

CHATTY = r"""
import os, sys, warnings
from pretrain.progress import Progress, attach, session, step
level = int(sys.argv[2])
with session(level, "chatty"):
    os.write(2, b"E core_worker.cc: C-level chatter\n")
    print("python chatter on stderr", file=sys.stderr)
    warnings.warn("megatron-style warning")
    step("[chatty] step one")
    for _ in Progress(range(3), desc="work", unit="item"):
        pass
    os.makedirs(sys.argv[1], exist_ok=True)
    attach(sys.argv[1])
print("summary line")
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}
    return {**env, "PRETRAIN_PROGRESS_S": "0", **extra}


def _chatty(tmp_path: Path, level: int) -> tuple[str, str, Path]:
    artifact = tmp_path / f"artifact{level}"
    done = subprocess.run(
        [sys.executable, "-c", CHATTY, str(artifact), str(level)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_clean_env(),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr, artifact


def test_library_output_goes_to_the_artifact_log_not_the_terminal(tmp_path):
    out, err, artifact = _chatty(tmp_path, progress.NORMAL)
    assert out == "summary line\n"
    lines = err.splitlines()
    assert lines[0] == "[chatty] step one"
    assert all(line.startswith("[") for line in lines) and "\r" not in err
    assert "[work] 3/3 item" in lines[-1] and "done in" in lines[-1]
    assert "chatter" not in err and "warning" not in err
    (log,) = (artifact / ".logs").glob("chatty-*.log")
    text = log.read_text()
    for chatter in ("C-level chatter", "python chatter on stderr", "megatron-style warning"):
        assert chatter in text


def test_verbose_shows_library_output_and_quiet_hides_steps(tmp_path):
    _, err, artifact = _chatty(tmp_path, progress.VERBOSE)
    assert "C-level chatter" in err and "megatron-style warning" in err
    assert not (artifact / ".logs").exists()
    out, err, artifact = _chatty(tmp_path, progress.QUIET)
    assert out == "summary line\n" and err == ""
    assert "C-level chatter" in next((artifact / ".logs").glob("*.log")).read_text()


def test_plain_lines_off_a_terminal(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(progress, "terminal", lambda: stream)
    monkeypatch.setenv("PRETRAIN_PROGRESS_S", "0")
    bar = progress.Progress(total=4, desc="encode", unit="shard")
    bar.update(1)
    bar.set_postfix(loss="2.31")
    bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[encode] 1/4 shard, ") and "ETA" in lines[0]
    assert lines[-1].startswith("[encode] 2/4 shard") and lines[-1].endswith("loss=2.31")
    assert "\r" not in stream.getvalue()
    # unchanged work prints no new line until the heartbeat interval
    monkeypatch.setenv("PRETRAIN_PROGRESS_S", "1000")
    quiet = progress.Progress(total=2, desc="slow", unit="it")
    quiet.update(0)
    quiet.close()
    assert stream.getvalue().splitlines() == lines


def test_quiet_disables_progress(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(progress, "terminal", lambda: stream)
    monkeypatch.setenv("PRETRAIN_PROGRESS_S", "0")
    monkeypatch.setenv("PRETRAIN_VERBOSITY", str(progress.QUIET))
    for _ in progress.Progress(range(5), desc="x"):
        pass
    progress.step("hidden")
    assert stream.getvalue() == ""


def test_a_live_bar_on_a_terminal(tmp_path):
    pty = pytest.importorskip("pty")
    code = (
        "from pretrain.progress import Progress\n"
        "for _ in Progress(range(3), desc='bar', unit='it'): pass\n"
    )
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # child: stderr is the pty, 30 rows x 100 columns
        fcntl.ioctl(2, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        os.execve(sys.executable, [sys.executable, "-c", code], _clean_env())
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert "\r" in text and "bar: 100%" in text  # tqdm's live frames


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_data_run_piped_prints_a_few_lines(tmp_path):
    docs = tmp_path / "docs.jsonl"
    import gzip

    with gzip.open(REPO / "pretrain" / "sample" / "prose.jsonl.gz", "rt") as source:
        docs.write_text("".join(line for _, line in zip(range(200), source, strict=False)))
    config = tmp_path / "p.yaml"
    config.write_text(
        f"inputs: [{docs}]\noutput: {tmp_path / 'out'}\n"
        "stages: {extract: {}, langid: {}, rules: {}, safety: {}, dedup: {}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "data", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=380,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pretrain data run: 200 docs in")
    lines = done.stderr.splitlines()
    assert len(lines) <= 5 and "\r" not in done.stderr, lines
    assert not any(" E " in line or "ERROR" in line for line in lines)
    (log,) = (tmp_path / "out" / ".logs").glob("*.log")
    assert "Started a local Ray instance" in log.read_text()
    verify = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "verify", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert verify.returncode == 0, verify.stderr


def test_a_watched_bar_ends_on_the_last_count_not_the_one_polled_before(monkeypatch):
    """Work measured elsewhere can finish between two polls: the bar's last line is the count
    when the watched block ended."""
    stream = io.StringIO()
    monkeypatch.setattr(progress, "terminal", lambda: stream)
    monkeypatch.setenv("PRETRAIN_PROGRESS_S", "0")
    count = [0]
    with progress.watch(progress.Progress(desc="tag", unit="docs"), lambda: (count[0], 10), 60):
        count[0] = 10  # done before the first poll (every 60 s)
    assert stream.getvalue().splitlines()[-1].startswith("[tag] 10/10 docs, ")


PROBE = r"""
import os, sys
from pretrain import progress
with progress.session(progress.NORMAL, "probe"):
    os.write(2, b"library chatter\n")
print(progress.log_path())
"""


def _probe_log(tmpdir: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_clean_env(TMPDIR=str(tmpdir)),
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


@pytest.mark.parametrize("planted", ["symlink", "open_folder"])
def test_logs_never_go_where_another_user_points_them(tmp_path, planted):
    """Another local user who made the shared log folder first (a symlink to a folder of their
    choice, or a folder anyone can write) gets no file of ours there: the log goes to a folder
    only this user can open, created 0600 without following links."""
    tmpdir, elsewhere = tmp_path / "tmp", tmp_path / "elsewhere"
    tmpdir.mkdir()
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)
    for name in ("pretrain-logs", f"pretrain-logs-{os.getuid()}"):
        if planted == "symlink":
            (tmpdir / name).symlink_to(elsewhere)
        else:
            (tmpdir / name).mkdir()
            (tmpdir / name).chmod(0o777)
    log = _probe_log(tmpdir)
    assert list(elsewhere.iterdir()) == []
    planted_dirs = [tmpdir / "pretrain-logs", tmpdir / f"pretrain-logs-{os.getuid()}"]
    assert log.parent not in planted_dirs
    assert planted == "symlink" or all(not list(p.iterdir()) for p in planted_dirs)
    assert "library chatter" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600
    assert log.parent.stat().st_mode & 0o777 == 0o700 and log.parent.stat().st_uid == os.getuid()
    assert not log.parent.is_symlink() and tmpdir in log.parents


def test_the_private_log_folder_is_reused(tmp_path):
    first, second = _probe_log(tmp_path), _probe_log(tmp_path)
    assert first.parent == second.parent == tmp_path / f"pretrain-logs-{os.getuid()}"
    assert first != second
