"""Parquet under seeded byte mutations, in a child process that a watchdog ends.

The hypothesis fuzz (test_reader_fuzz.py) leaves Parquet out of its byte mutations: one mutated
file once made pyarrow's C++ reader run past the test timeout, which no signal could interrupt.
Here the same mutations (edits and cuts of the valid fixture) run in a child process; a hang fails
the test naming the seed instead of stalling the suite, and any uncaught exception or unbalanced
ledger fails it with the child's traceback.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEEDS = 20_000
STALL_S = 60.0

CHILD = """
import random, sys
from tests.data_pipeline.test_reader_fuzz import VALID, _mutate, _read_and_account
base = VALID["x.parquet"]
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    rnd = random.Random(seed)
    edits = [(rnd.randrange(10**6), rnd.randrange(256)) for _ in range(rnd.randint(0, 6))]
    cut = None if rnd.random() < 0.5 else rnd.randrange(10**6)
    print(seed, flush=True)
    _read_and_account("x.parquet", _mutate(base, edits, cut))
print("done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_parquet_mutations_never_hang_or_escape(tmp_path: Path) -> None:
    script = tmp_path / "parquet_fuzz.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(REPO), PRETRAIN_CACHE=str(tmp_path / "cache"))
    child = subprocess.Popen(
        [sys.executable, str(script), "0", str(SEEDS)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    last, finished = None, False
    try:
        while True:
            ready, _, _ = select.select([child.stdout], [], [], STALL_S)
            if not ready:
                pytest.fail(f"the Parquet reader stalled for {STALL_S:.0f} s after seed {last}")
            line = child.stdout.readline().strip()
            if not line:
                break
            if line == "done":
                finished = True
            else:
                last = int(line)
    finally:
        child.kill()
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    error = child.stderr.read()[-3000:]
    assert finished, f"the reader failed on seed {last}:\n{error}"
