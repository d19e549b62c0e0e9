"""pretrain.program.run: what a command's failure prints."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.program import run


def _parser(error: BaseException, code: int = errno.ENOSPC) -> argparse.ArgumentParser:
    def handler(args: argparse.Namespace) -> int:
        try:
            raise OSError(code, "No space left on device", "/out/ledger.json")
        except OSError as exc:
            raise error from exc  # e.g. a Ray task's error holding the worker's OSError

    parser = argparse.ArgumentParser(prog="pretrain")
    parser.set_defaults(handler=handler, command="data")
    return parser


def test_a_full_disk_under_another_error_is_one_line_exit_2(capsys) -> None:
    assert run(_parser(RuntimeError("task failed")), []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "pretrain data: error: No space left on device writing /out/ledger.json; free space"
    )


def test_any_other_error_even_another_oserror_keeps_its_traceback() -> None:
    with pytest.raises(ZeroDivisionError):
        run(_parser(ZeroDivisionError("a bug"), errno.EACCES), [])


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}
    return {**env, **extra}


def test_a_read_only_output_is_one_line_exit_2(tmp_path) -> None:
    """A data run whose output is on a read-only file system (a tmpfs mounted read-only in a
    mount namespace of its own) says so in one line (was a 28-line EROFS traceback, exit 1)."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.skip("no mount namespace here (unshare -m) to make a read-only file system")
    (tmp_path / "in.jsonl").write_text('{"text": "one document of a few words"}\n')
    readonly = tmp_path / "ro"
    readonly.mkdir()
    config = tmp_path / "job.yaml"
    config.write_text(f"inputs: [{tmp_path / 'in.jsonl'}]\noutput: {readonly / 'out'}\n")
    script = f'mount -t tmpfs -o ro tmpfs "{readonly}" && exec "$@"'
    command = [sys.executable, "-m", "pretrain_app", "data", "run", str(config)]
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "Read-only file system" in lines[0] and str(readonly) in lines[0]
    assert "writable" in lines[0]


def test_a_mistyped_verify_mode_is_refused(tmp_path) -> None:
    """PRETRAIN_VERIFY=ful (a typo of full) meant the cached mode, silently."""
    done = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "verify", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(PRETRAIN_VERIFY="ful"),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "pretrain verify: error: PRETRAIN_VERIFY='ful' is not one of cached, full; fix or unset it"
    )


def _in_small_tmpfs(mount: Path, size: str, command: list[str]) -> subprocess.CompletedProcess:
    """`command` run with a `size` tmpfs at `mount`, in a mount namespace of its own."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.skip("no mount namespace here (unshare -m) to make a small file system")
    mount.mkdir()
    script = f'mount -t tmpfs -o size={size} tmpfs "{mount}" && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_env(PYTHONDONTWRITEBYTECODE="1"),
    )


def test_a_copy_refused_names_the_file_written_not_its_source(capsys) -> None:
    """shutil's copy names its source first: the log copied into a full output was reported as
    `writing /tmp/pretrain-logs-0/...log` (a file on another, roomy, disk)."""

    def handler(args: argparse.Namespace) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/src.log", None, "/out/a.log")

    parser = argparse.ArgumentParser(prog="pretrain")
    parser.set_defaults(handler=handler, command="data")
    assert run(parser, []) == 2
    assert "writing /out/a.log;" in capsys.readouterr().err


def test_an_actor_that_died_of_a_full_disk_is_one_line(capsys) -> None:
    """A Ray actor whose __init__ hit the full disk dies with an ActorDiedError that holds the
    worker's OSError only as text (was a 260-line traceback, exit 1)."""
    from ray.exceptions import RayActorError

    text = (
        "The actor died because of an error raised in its creation task, ray::MapWorker()\n"
        "OSError: [Errno 28] No space left on device\n\n"
        "OSError: [Errno 28] No space left on device: '/out/.parts/cost/setup/vm-1.json'\n"
    )

    def handler(args: argparse.Namespace) -> int:
        raise RayActorError(None, text, True, False)

    parser = argparse.ArgumentParser(prog="pretrain")
    parser.set_defaults(handler=handler, command="data")
    assert run(parser, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "writing /out/.parts/cost/setup/vm-1.json;" in err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_data_run_into_a_full_disk_is_one_line_naming_the_output(tmp_path) -> None:
    """`pretrain data run` writing into a 80 kB tmpfs (the disk fills mid-run; which write
    fails first varies: a cost record in an actor's __init__, a shard, the log copied in):
    one line naming a file inside the output and what to do, exit 2, no traceback."""
    data = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
    full = tmp_path / "full"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"inputs: [{data}]\noutput: {full / 'out'}\nstages: {{extract: {{}}, langid: {{}}}}\n"
    )
    done = _in_small_tmpfs(
        full, "80k", [sys.executable, "-m", "pretrain_app", "data", "run", str(config)]
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(ours) == 1, done.stderr[-3000:]
    assert ours[0].startswith(
        f"pretrain data run: error: No space left on device writing {full / 'out'}"
    )
    assert "free space" in ours[0]
