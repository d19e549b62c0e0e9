"""Two `pretrain launch`es into one run.out_dir at once (the real CLI, clean env): exactly one
trains, the other refuses in one line naming the holder's pid and command, and the run is what one
uninterrupted launch makes (metrics.jsonl's losses bit for bit, one record per step, no log of the
refused launch in RUN/.logs/). Since this change the lock is probed before the preflight (which
reads the checkpoints the holder is saving and pruning) and the log is attached only once the lock
is held."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_env
from tests.trainer.trainer_testlib import losses, tiny_config

REPO = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, run: Path, *extra: str) -> subprocess.Popen[str]:
    config = tmp_path / "train.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump(tiny_config(run)))
    env = {**clean_env(), "PYTHONPATH": str(REPO), "PRETRAIN_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "pretrain_app", "launch", str(config), "--nproc", "1", *extra]
    return subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    outputs = [p.communicate(timeout=500) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


def _check(run: Path, results: list[tuple[int, str, str]], pids: list[int], expected) -> None:
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 2], [(rc, out[-1500:], err[-1500:]) for rc, out, err in results]
    winner = next(i for i, (rc, _, _) in enumerate(results) if rc == 0)
    _, _, err = results[1 - winner]
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"pretrain launch: error: output {run} is being written by pid "), (
        lines
    )
    assert f"pid {pids[winner]} " in lines[0] and "pretrain launch" in lines[0][40:], lines
    assert losses(run) == expected
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r and r.get("event") is None]
    assert steps == [1, 2, 3, 4, 5, 6]  # one launch's records, none twice
    logs = [p.name for p in (run / ".logs").iterdir()]
    assert len(logs) <= 1 and all(f"-{pids[winner]}.log" in name for name in logs), logs


@pytest.mark.timeout(900)
def test_a_second_launch_into_a_run_being_trained_is_refused_naming_the_holder(
    tmp_path, reference_run
):
    """The second starts once the first holds the lock (deterministic: the first is training)."""
    run = tmp_path / "run"
    first = _start(tmp_path, run)
    lock = tmp_path / ".run.lock"
    deadline = time.monotonic() + 300
    while not (lock.is_file() and lock.stat().st_size) and first.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = _start(tmp_path, run, "--in-process")
    results = _finish([first, second])
    _check(run, results, [first.pid, second.pid], reference_run[1])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("extra", [[], ["--in-process"]])
def test_two_launches_started_together_one_trains(tmp_path, reference_run, extra):
    run = tmp_path / "run"
    procs = [_start(tmp_path, run, *extra) for _ in range(2)]
    results = _finish(procs)
    _check(run, results, [p.pid for p in procs], reference_run[1])
