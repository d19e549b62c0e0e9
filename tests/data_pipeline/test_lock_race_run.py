"""Two real `pretrain data run` into one local output at once (a user starting the same job in
two terminals): exactly one runs, the other is refused in one line naming it and writes nothing
there (not even its log), and the winner's output is byte for byte a solo run's. The two jobs
differ in shard size, so any file of the loser's job would show. Real processes, real `flock`,
real Ray, clean environments."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline
from pretrain.locking import read_holder
from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run
from tests.data_pipeline.test_runner_cluster_s3_out import _local, _published

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(600)]

CONFIG = {"inputs": [str(DATA)], "batch_rows": 3, "ray": {"num_cpus": 1, "timeout_s": 300}}


def _start(tmp: Path, out: Path, rows: int) -> subprocess.Popen:
    argv = data_run({**CONFIG, "shard_rows": rows, "output": str(out)}, tmp / f"w{rows}.yaml")
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=clean_env(tmp / f"home{rows}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _holder(out: Path, runs: list[subprocess.Popen]) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        record = read_holder(out)
        if record and record.get("pid") in {run.pid for run in runs}:
            return record
        assert any(run.poll() is None for run in runs), "both runs exited before either locked"
        time.sleep(0.01)
    raise AssertionError("neither run took the lock")


def test_two_data_runs_into_one_output_at_once_one_is_refused(ray_local, tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = {rows: _start(tmp_path, out, rows) for rows in (4, 6)}
    holder = _holder(out, list(runs.values()))
    winner_rows = next(rows for rows, run in runs.items() if run.pid == holder["pid"])
    winner, loser = runs[winner_rows], runs[10 - winner_rows]
    os.kill(winner.pid, signal.SIGSTOP)  # it may not finish before the other one has tried
    try:
        _, loser_err = loser.communicate(timeout=300)
    finally:
        os.kill(winner.pid, signal.SIGCONT)
    _, winner_err = winner.communicate(timeout=500)
    assert winner.returncode == 0, winner_err[-2000:]
    assert loser.returncode == 2, loser_err[-2000:]
    lines = loser_err.strip().splitlines()
    assert len(lines) == 1, loser_err[-2000:]
    assert lines[0].startswith(f"pretrain data run: error: output {out} is being written by ")
    assert f"pid {winner.pid} on {holder['host']}" in lines[0], lines[0]
    assert f"w{winner_rows}.yaml" in lines[0]
    logs = [p.name for p in (out / ".logs").iterdir()]
    assert not [name for name in logs if name.endswith(f"-{loser.pid}.log")], logs

    solo = tmp_path / "solo"  # in this process, on the test session's Ray: no second start-up
    run_pipeline(PipelineConfig(**{**CONFIG, "shard_rows": winner_rows, "output": str(solo)}))
    assert _published(_local(out)) == _published(_local(solo))
