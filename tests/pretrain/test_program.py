"""pretrain.program.run: what a command's failure prints."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import subprocess
import sys

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
