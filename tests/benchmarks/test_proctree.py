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

import psutil

from benchmarks.proctree import TreeSampler

# A plain Python process (role `other`) until told to go on (a line on stdin), then it execs into
# a command line that names a Ray worker, burns 0.5 CPU-seconds there and waits to be killed (the
# name is built at run time: the first command line must not hold it).
CHILD = (
    "import os, sys; sys.stdin.readline(); "
    "os.execv(sys.executable, [sys.executable, '-c', "
    "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass\\n"
    "time.sleep(60)', 'default_' + 'worker.py'])"
)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_role_follows_exec() -> None:
    # samples are taken here, when the child is in each state (a sampling thread racing a child's
    # sleep missed it on a loaded machine): the thread's interval is longer than the test
    with TreeSampler(interval=600, memory=False) as sampler:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, text=True)
        proc = psutil.Process(child.pid)
        try:
            _until(lambda: "readline" in " ".join(proc.cmdline()), "the child never started")
            sampler.sample()
            assert sampler.procs[child.pid].role == "other"
            child.stdin.write("go\n")
            child.stdin.flush()
            _until(lambda: "default_worker.py" in " ".join(proc.cmdline()), "no exec")
            _until(lambda: sum(proc.cpu_times()[:2]) >= 0.4, "the worker never burned its CPU")
            sampler.sample()
        finally:
            child.kill()
            child.wait()
    stats = sampler.procs[child.pid]
    assert stats.role == "worker", (stats.role, stats.command)
    assert stats.cpu_s >= 0.3


def test_other_names_its_commands() -> None:
    with TreeSampler(interval=600, memory=False) as sampler:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        proc = psutil.Process(child.pid)
        try:
            _until(lambda: "time.sleep(60)" in " ".join(proc.cmdline()), "the child never ran")
            sampler.sample()
        finally:
            child.kill()
            child.wait()
    other = sampler.by_role()["other"]
    assert any("time.sleep(60)" in cmd for cmd in other["commands"]), other


def test_the_sampling_cpu_is_counted_apart() -> None:
    """The sampler runs in the process it samples (a benchmark's driver): the CPU its smaps reads
    take is counted in `own_cpu_s` (before: no such count, so it was the driver's), and it is
    part of this process's CPU as sampled, not more."""
    start = time.process_time()
    with TreeSampler(interval=0.05, breakdown=True) as sampler:
        time.sleep(0.5)
    assert 0 < sampler.own_cpu_s <= time.process_time() - start
