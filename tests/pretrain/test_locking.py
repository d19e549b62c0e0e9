"""One writer per output: a second writer is refused naming the holder; a killed holder's lock is
taken over. Real processes, real `flock`, and a real writer command (`pretrain mixture build`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pretrain.locking import OutputLocked, lock_path, output_lock, read_holder
from pretrain.manifest import load_manifest
from pretrain_app.cli import main
from tests.mixtures.conftest import make_encoded, mixture_config

pytestmark = pytest.mark.timeout(120)

HOLDER = """
import sys
from pretrain.provenance import recorded
from pretrain.locking import output_lock
with recorded(["pretrain", "holder-test"]), output_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def encoded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_encoded(tmp_path_factory.mktemp("encoded") / "enc")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}


def _hold(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _build_argv(tmp_path: Path, encoded_dir: Path, out: Path) -> list[str]:
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(mixture_config(encoded_dir, out)))
    return ["mixture", "build", str(path)]


def test_second_writer_refused_then_killed_holder_taken_over(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "mix"
    argv = _build_argv(tmp_path, encoded_dir, out)
    holder = _hold(out)
    try:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert f"pid {holder.pid} on {socket.gethostname()}" in err[0]
        assert "pretrain holder-test" in err[0]
        assert not out.exists(), "the refused writer must write nothing"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert read_holder(out)["pid"] == holder.pid  # the killed holder's record is left behind
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"taking over the lock on {out} left by pid {holder.pid}" in captured.err
    assert load_manifest(out)["kind"] == "mixture"
    assert read_holder(out) is None  # a clean release leaves no record


def test_finished_holder_releases(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    holder = _hold(out)
    with pytest.raises(OutputLocked, match=f"pid {holder.pid}"), output_lock(out):
        pass
    holder.stdin.close()  # the holder leaves its `with` block and exits normally
    assert holder.wait(timeout=30) == 0
    with output_lock(out) as locked:
        assert locked == out
        assert read_holder(out)["pid"] == os.getpid()


def test_lock_survives_the_output_being_replaced(tmp_path: Path) -> None:
    """Builders rename a staging directory over their output: the lock must not live inside it."""
    out = tmp_path / "artifact"
    out.mkdir()
    with output_lock(out):
        assert lock_path(out).parent == tmp_path
        assert not any(out.iterdir())


def test_same_process_may_reenter(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    with output_lock(out):
        with output_lock(out):
            pass
        holder = subprocess.run(
            [sys.executable, "-c", HOLDER, str(out)],
            input="",
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=60,
        )
        assert holder.returncode != 0 and f"pid {os.getpid()}" in holder.stderr
    assert read_holder(out) is None
