"""Where a data run's CPU went, phase by phase, from a sampled process tree (benchmarks.proctree).

The runner records each phase's wall span (manifest `throughput.run.phase_spans`: stream, the
global stages' map / aggregate / join, merge). Each sampled process's CPU-seconds are attributed
to the phases by its time series (a step function: CPU at the last sample before the boundary).
Per phase: CPU of every process (`cpu_s`), of Ray workers (`worker_cpu_s`), of everything else
(driver, raylet, GCS, agents, the watchdog: `system_cpu_s`), the busiest single process
(`max_process_cpu_s`), and `cpu_bound_s` = max(busiest process, all CPU / cores): the least wall
the phase could take on `cores` otherwise idle cores, from its CPU alone (no latency, no Ray
logical-CPU limit). On a loaded machine wall time measures the machine; these do not.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from benchmarks.proctree import ProcStats


def cpu_at(series: list[tuple[float, float]], when: float) -> float:
    """CPU-seconds of a process at `when` (0 before its first sample)."""
    index = bisect_right(series, (when, float("inf")))
    return series[index - 1][1] if index else 0.0


def phase_cpu(
    procs: dict[int, ProcStats], spans: list[list[Any]], cores: int
) -> dict[str, dict[str, float]]:
    """Per phase (merged when a name recurs), the CPU breakdown described in the module doc."""
    phases: dict[str, dict[str, float]] = {}
    for name, start, end in spans:
        deltas = [
            (stats.role, cpu_at(stats.series, end) - cpu_at(stats.series, start))
            for stats in procs.values()
            if stats.series
        ]
        entry = phases.setdefault(
            name,
            {
                "wall_s": 0.0,
                "cpu_s": 0.0,
                "worker_cpu_s": 0.0,
                "system_cpu_s": 0.0,
                "max_process_cpu_s": 0.0,
                "cpu_bound_s": 0.0,
            },
        )
        total = sum(d for _, d in deltas)
        busiest = max((d for _, d in deltas), default=0.0)
        workers = sum(d for role, d in deltas if role == "worker")
        entry["wall_s"] += end - start
        entry["cpu_s"] += total
        entry["worker_cpu_s"] += workers
        entry["system_cpu_s"] += total - workers
        entry["max_process_cpu_s"] = max(entry["max_process_cpu_s"], busiest)
        entry["cpu_bound_s"] += max(busiest, total / cores)
    return {n: {k: round(v, 2) for k, v in e.items()} for n, e in phases.items()}


def phase_roles(procs: dict[int, ProcStats], spans: list[list[Any]]) -> dict[str, dict[str, float]]:
    """Per phase (merged when a name recurs), CPU-seconds by process role (proctree.role)."""
    phases: dict[str, dict[str, float]] = {}
    for name, start, end in spans:
        entry = phases.setdefault(name, {})
        for stats in procs.values():
            if stats.series:
                spent = cpu_at(stats.series, end) - cpu_at(stats.series, start)
                entry[stats.role] = entry.get(stats.role, 0.0) + spent
    return {n: {r: round(v, 2) for r, v in sorted(e.items())} for n, e in phases.items()}
