"""Memory and CPU of a whole process tree, sampled: the driver, every Ray process it started
(GCS, raylet, agents, workers) and any other child (a baseline run in a subprocess).

RSS counts a shared page (the object store's shared memory, mapped libraries) in every process
that touches it, so the tree's total is taken as the sum of PSS (shared pages split between the
processes mapping them) sampled at one instant; per process both peaks are kept.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

MB = 1024 * 1024


def role(proc: psutil.Process, driver: int) -> str:
    """driver / worker / raylet / gcs / ray-system / other, from the command line."""
    if proc.pid == driver:
        return "driver"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return "gone"
    if "default_worker.py" in cmd or cmd.startswith("ray::"):
        return "worker"
    for name in ("raylet", "gcs_server"):
        if name in cmd:
            return name.replace("_server", "")
    return "ray-system" if "ray" in cmd else "other"


@dataclass
class ProcStats:
    role: str
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0
    cpu_start_s: float | None = None
    cpu_last_s: float = 0.0

    @property
    def cpu_s(self) -> float:
        return self.cpu_last_s - (self.cpu_start_s or 0.0)


@dataclass
class TreeSampler:
    """Samples the tree below `root` every `interval` seconds in a thread (`with` block)."""

    root: int = field(default_factory=os.getpid)
    interval: float = 0.5
    procs: dict[int, ProcStats] = field(default_factory=dict)
    peak_total_pss_mb: float = 0.0
    peak_total_rss_mb: float = 0.0
    known: set[int] = field(default_factory=set)
    """pids that existed before `start`: their CPU counts from the first sample on."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _tree(self) -> list[psutil.Process]:
        top = psutil.Process(self.root)
        try:
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return [top]

    def sample(self) -> None:
        total_pss = total_rss = 0.0
        for proc in self._tree():
            try:
                with proc.oneshot():
                    info = proc.memory_full_info()
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            stats = self.procs.get(proc.pid)
            if stats is None:
                stats = self.procs[proc.pid] = ProcStats(role(proc, self.root))
            cpu = times.user + times.system
            if stats.cpu_start_s is None:
                stats.cpu_start_s = cpu if proc.pid in self.known else 0.0
            stats.cpu_last_s = cpu
            stats.peak_rss_mb = max(stats.peak_rss_mb, info.rss / MB)
            stats.peak_pss_mb = max(stats.peak_pss_mb, info.pss / MB)
            total_pss += info.pss / MB
            total_rss += info.rss / MB
        self.peak_total_pss_mb = max(self.peak_total_pss_mb, total_pss)
        self.peak_total_rss_mb = max(self.peak_total_rss_mb, total_rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> TreeSampler:
        self.known = {p.pid for p in self._tree()}
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def by_role(self) -> dict[str, dict[str, float]]:
        """Per role: processes, largest peak RSS / PSS of one process, summed CPU seconds."""
        out: dict[str, dict[str, float]] = {}
        for stats in self.procs.values():
            entry = out.setdefault(
                stats.role, {"processes": 0, "max_peak_rss_mb": 0.0, "max_peak_pss_mb": 0.0}
            )
            entry["processes"] += 1
            entry["max_peak_rss_mb"] = round(max(entry["max_peak_rss_mb"], stats.peak_rss_mb), 1)
            entry["max_peak_pss_mb"] = round(max(entry["max_peak_pss_mb"], stats.peak_pss_mb), 1)
            entry["cpu_s"] = round(entry.get("cpu_s", 0.0) + stats.cpu_s, 2)
        return out

    def cpu_s(self, roles: tuple[str, ...] | None = None) -> float:
        return sum(s.cpu_s for s in self.procs.values() if roles is None or s.role in roles)


def idle_snapshot(root: int | None = None, settle_s: float = 1.0) -> TreeSampler:
    """One sample of the tree after `settle_s` (the fixed cost of a started, idle Ray)."""
    time.sleep(settle_s)
    sampler = TreeSampler(root or os.getpid())
    sampler.sample()
    return sampler
