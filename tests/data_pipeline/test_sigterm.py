"""SIGTERM (a scheduler's stop, `kill PID`) stops `pretrain data run` as Ctrl-C does: one line
saying what to do, exit 143 (the shell's 128 + 15), every process it started gone, nothing new
started on the way out, and the same command run again finishes the job."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.data_pipeline.raytools import REPO, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.serial]

RUN = [sys.executable, "-m", "pretrain_app", "data", "run", "configs/pipeline.yaml"]


def test_sigterm_mid_run_is_one_line_exit_143_and_the_rerun_finishes(tmp_path: Path) -> None:
    argv = [*RUN, "--set", f"output={tmp_path / 'out'}"]
    env = clean_env(tmp_path / "home", PRETRAIN_PROGRESS_S="0")
    err = (tmp_path / "stderr").open("w+")
    command = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 300
    while command.poll() is None and time.monotonic() < deadline:
        if " docs" in (tmp_path / "stderr").read_text():  # the stream is tagging documents
            break
        time.sleep(0.2)
    assert command.poll() is None, (tmp_path / "stderr").read_text()
    started = psutil.Process(command.pid).children(recursive=True)
    command.send_signal(signal.SIGTERM)
    assert command.wait(120) == 143, (tmp_path / "stderr").read_text()[-3000:]
    lines = (tmp_path / "stderr").read_text().strip().splitlines()
    assert lines[-1] == (
        "pretrain data run: terminated (SIGTERM); run the same command again: what was "
        "finished is reused"
    )
    _, alive = psutil.wait_procs(started, timeout=60)
    assert not alive, [p.cmdline() for p in alive]
    (log,) = (tmp_path / "out" / ".logs").glob("*.log")
    text = log.read_text()
    # Ray Data's threads, still stopping, started a second Ray with `ray.init()` from a thread
    assert text.count("Started a local Ray instance") == 1
    assert "SIGTERM handler is not set" not in text

    again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "ledger balanced: True" in again.stdout
