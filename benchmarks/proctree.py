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


RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::DashboardHead")
RAY_DATA_ACTORS = (
    "ray::_StatsActor",
    "ray::_AutoscalingCoordinatorActor",
    "ray::AutoscalingRequester",
)
"""Actors Ray Data starts once per driver (its stats and autoscaling bookkeeping): a fixed cost."""


def command(proc: psutil.Process) -> str | None:
    """The process's command line as one string; None once it is gone."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def role(proc: psutil.Process, driver: int, cmd: str | None = None) -> str:
    """driver / worker / ray-data-actor / raylet / gcs / ray-system / other, from the command
    line (`cmd`, read here unless given). The raylet is named by its executable first: its
    command line carries the worker command (default_worker.py); Ray's agents are named
    `ray::...` like workers."""
    if proc.pid == driver:
        return "driver"
    cmd = command(proc) if cmd is None else cmd
    if cmd is None:
        return "gone"
    exe = os.path.basename(cmd.split(" ", 1)[0]) if cmd else ""
    if exe in ("raylet", "gcs_server"):
        return exe.replace("_server", "")
    if cmd.startswith(RAY_AGENTS):
        return "ray-system"
    if cmd.startswith(RAY_DATA_ACTORS):
        return "ray-data-actor"
    if "default_worker.py" in cmd or cmd.startswith("ray::"):
        return "worker"
    return "ray-system" if "ray" in cmd else "other"


@dataclass
class ProcStats:
    role: str
    command: str = ""
    """The command line at the last sample (a forked child shows its parent's until it execs,
    and a Ray worker renames itself `ray::...`: the role is re-read from it every sample)."""
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0
    peak_uss_mb: float = 0.0
    """Private memory (no shared pages: not the object store's, not mapped libraries)."""
    cpu_start_s: float | None = None
    cpu_last_s: float = 0.0
    series: list[tuple[float, float]] = field(default_factory=list)
    """(Unix time, CPU-seconds since the first sample) per sample, with `TreeSampler.series`."""

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
    memory: bool = True
    """False: CPU times only (no smaps read per process per sample: far cheaper)."""
    series: bool = False
    """Keep every process's CPU time series (benchmarks.phasecpu attributes it to phases)."""
    breakdown: bool = False
    """Keep, for the sample with the largest total PSS, each process's PSS split into shared
    memory (/dev/shm mappings: Ray's object store) and the rest (`at_peak`)."""
    at_peak: dict = field(default_factory=dict)
    own_cpu_s: float = 0.0
    """CPU-seconds the sampling itself took in this process (thread CPU time of every `sample`
    call: reading each process's smaps is not free), so a caller can take it off the role of
    the process that samples (the driver's, when the tree's root is the driver)."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _tree(self) -> list[psutil.Process]:
        try:
            top = psutil.Process(self.root)
        except psutil.NoSuchProcess:  # the root exited (and was reaped) before this sample
            return []
        try:
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return [top]

    def sample(self) -> None:
        start = time.thread_time()
        try:
            self._sample()
        finally:
            self.own_cpu_s += time.thread_time() - start

    def _sample(self) -> None:
        total_pss = total_rss = 0.0
        snapshot: list[dict] = []
        for proc in self._tree():
            try:
                with proc.oneshot():
                    info = proc.memory_full_info() if self.memory else None
                    times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            cmd = command(proc)
            stats = self.procs.get(proc.pid)
            if stats is None:
                stats = self.procs[proc.pid] = ProcStats(role(proc, self.root, cmd))
            elif cmd is not None:
                # Re-read every sample, not only at first sight: a child seen between its fork
                # and its exec carries its parent's command line (the raylet's, or the driver's,
                # which classed as `other`), and an idle worker may become an actor later.
                stats.role = role(proc, self.root, cmd)
            if cmd is not None:
                stats.command = cmd[:160]
            cpu = times.user + times.system
            if stats.cpu_start_s is None:
                stats.cpu_start_s = cpu if proc.pid in self.known else 0.0
            stats.cpu_last_s = cpu
            if self.series:
                stats.series.append((time.time(), stats.cpu_s))
            if info is None:
                continue
            stats.peak_rss_mb = max(stats.peak_rss_mb, info.rss / MB)
            stats.peak_pss_mb = max(stats.peak_pss_mb, info.pss / MB)
            stats.peak_uss_mb = max(stats.peak_uss_mb, info.uss / MB)
            total_pss += info.pss / MB
            total_rss += info.rss / MB
            if self.breakdown:
                snapshot.append(_split(proc, stats.role, info.pss))
        if self.breakdown and total_pss > self.peak_total_pss_mb:
            self.at_peak = {"unix_time": time.time(), "total_pss_mb": total_pss, "procs": snapshot}
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
                stats.role,
                {
                    "processes": 0,
                    "max_peak_rss_mb": 0.0,
                    "max_peak_pss_mb": 0.0,
                    "max_peak_uss_mb": 0.0,
                },
            )
            entry["processes"] += 1
            entry["max_peak_rss_mb"] = round(max(entry["max_peak_rss_mb"], stats.peak_rss_mb), 1)
            entry["max_peak_pss_mb"] = round(max(entry["max_peak_pss_mb"], stats.peak_pss_mb), 1)
            entry["max_peak_uss_mb"] = round(max(entry["max_peak_uss_mb"], stats.peak_uss_mb), 1)
            entry["cpu_s"] = round(entry.get("cpu_s", 0.0) + stats.cpu_s, 2)
            if stats.role == "other":  # unexplained CPU: say which processes it was
                commands = entry.setdefault("commands", {})
                commands[stats.command] = round(commands.get(stats.command, 0.0) + stats.cpu_s, 2)
        return out

    def started(self, roles: tuple[str, ...]) -> int:
        """Processes of these roles that appeared while sampling (absent at `start`)."""
        return sum(1 for pid, s in self.procs.items() if s.role in roles and pid not in self.known)

    def cpu_s(self, roles: tuple[str, ...] | None = None) -> float:
        return sum(s.cpu_s for s in self.procs.values() if roles is None or s.role in roles)


def _split(proc: psutil.Process, role: str, pss: int) -> dict:
    """One process's PSS (MB) split into its /dev/shm mappings (Ray's object store) and the rest."""
    shm = 0
    try:
        for mapping in proc.memory_maps(grouped=True):
            if mapping.path.startswith("/dev/shm") or "plasma" in mapping.path:
                shm += mapping.pss
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        pass
    return {
        "pid": proc.pid,
        "role": role,
        "pss_mb": round(pss / MB, 1),
        "shm_pss_mb": round(shm / MB, 1),
    }


def summarise_peak(at_peak: dict) -> dict:
    """Per role at the peak sample: processes, PSS, of which shared memory (object store)."""
    out: dict[str, dict[str, float]] = {}
    for proc in at_peak.get("procs", []):
        entry = out.setdefault(proc["role"], {"processes": 0, "pss_mb": 0.0, "shm_pss_mb": 0.0})
        entry["processes"] += 1
        entry["pss_mb"] = round(entry["pss_mb"] + proc["pss_mb"], 1)
        entry["shm_pss_mb"] = round(entry["shm_pss_mb"] + proc["shm_pss_mb"], 1)
    return out


def idle_snapshot(root: int | None = None, settle_s: float = 1.0) -> TreeSampler:
    """One sample of the tree after `settle_s` (the fixed cost of a started, idle Ray)."""
    time.sleep(settle_s)
    sampler = TreeSampler(root or os.getpid())
    sampler.sample()
    return sampler
