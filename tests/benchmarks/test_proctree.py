"""benchmarks.proctree names each process by what it runs, not by what it was when first seen.

A child sampled between its fork and its exec still carries its parent's command line; Ray's
workers start as `python ... default_worker.py` and rename themselves. Classified once, at first
sight, such a process kept the wrong role for the whole run (6.88 CPU-seconds of a 2-worker
scaling run were filed under `other`).
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.proctree import TreeSampler

# Sleeps as a plain Python process (role `other`), then execs into a command line that names a
# Ray worker and burns CPU there (the name is built at run time: the first command line must not
# hold it).
CHILD = (
    "import os, sys, time; time.sleep(0.6); "
    "os.execv(sys.executable, [sys.executable, '-c', "
    "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass\\n"
    "time.sleep(0.5)', 'default_' + 'worker.py'])"
)


def test_role_follows_exec() -> None:
    with TreeSampler(interval=0.1, memory=False) as sampler:
        child = subprocess.Popen([sys.executable, "-c", CHILD])
        deadline = time.monotonic() + 30
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.returncode == 0
    # this child's record, not the tree's roles: a test run before this one can leave children
    # of its own (Ray's processes after a `ray.init`) in the sampled tree
    stats = sampler.procs[child.pid]
    assert stats.role == "worker", (stats.role, stats.command)
    assert stats.cpu_s >= 0.3


def test_other_names_its_commands() -> None:
    with TreeSampler(interval=0.1, memory=False) as sampler:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)"], check=True)
    other = sampler.by_role()["other"]
    assert any("time.sleep(0.5)" in cmd for cmd in other["commands"]), other


def test_the_sampling_cpu_is_counted_apart() -> None:
    """The sampler runs in the process it samples (a benchmark's driver): the CPU its smaps reads
    take is counted in `own_cpu_s` (before: no such count, so it was the driver's), and it is
    part of this process's CPU as sampled, not more."""
    start = time.process_time()
    with TreeSampler(interval=0.05, breakdown=True) as sampler:
        time.sleep(0.5)
    assert 0 < sampler.own_cpu_s <= time.process_time() - start
