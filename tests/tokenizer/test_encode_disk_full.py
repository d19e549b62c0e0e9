"""`pretrain tokenizer encode` into a disk that fills up (a small tmpfs in a mount namespace of
its own): one line naming the output and what to do, exit 2. Before: the line named no file
(the refused write was to an open .bin, which carries no name)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env


def test_encode_into_a_full_disk_is_one_line_naming_the_output(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path
) -> None:
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.skip("no mount namespace here (unshare -m) to make a small file system")
    full = tmp_path / "full"
    full.mkdir()
    command = [sys.executable, "-m", "pretrain_app", "tokenizer", "encode", str(tokenizer_dir)]
    command += ["--data", str(shards_dir), "--out", str(full / "enc"), "--no-ray"]
    script = f'mount -t tmpfs -o size=64k tmpfs "{full}" && exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean_env(), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(
        f"pretrain tokenizer encode: error: No space left on device writing {full / 'enc'}"
    )
    assert "free space" in lines[0]
