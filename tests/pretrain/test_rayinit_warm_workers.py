"""A local Ray keeps its idle task workers between a data run's phases (rayinit.WARM_LOCAL).

A run's stream holds stage actors beside its read tasks, so the node has more worker processes
than CPUs; with Ray's default an idle task worker is then killed after 1 s, and every phase
after the stream (dedup's map, the merge) started fresh processes (interpreter and imports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os, sys, time
import ray
from pretrain import rayinit
if sys.argv[1] == "default":
    rayinit.WARM_LOCAL.clear()
rayinit.connect(None, num_cpus=1)

@ray.remote(num_cpus=0.5)
class Stage:  # a stage actor alive across the idle gap, as in the stream
    def pid(self):
        return os.getpid()

@ray.remote(num_cpus=0.5)
def task():
    return os.getpid()

actor = Stage.remote()
ray.get(actor.pid.remote())
first = ray.get(task.remote())
time.sleep(4)  # idle: past Ray's default 1 s (plus its 200 ms kill interval), the phase gap
second = ray.get(task.remote())
print(json.dumps({"first": first, "second": second}))
rayinit.shutdown(True)
"""


def _pids(mode: str) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a local Ray start: ~8 s quiet, 38 s at load 33
def test_a_task_after_an_idle_gap_runs_in_the_warm_worker_not_a_fresh_process():
    pids = _pids("warm")
    assert pids["first"] == pids["second"]
