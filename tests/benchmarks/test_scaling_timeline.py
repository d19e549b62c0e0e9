"""benchmarks.bench_scaling_timeline: CPU put into 1-s bins by role, phases with the time between
them named, and idle core-seconds per phase (the arithmetic, on a made-up run)."""

from __future__ import annotations

from benchmarks.bench_scaling_timeline import bins, by_phase, segments, split_tail
from benchmarks.proctree import ProcStats


def _proc(role: str, series: list[tuple[float, float]]) -> ProcStats:
    return ProcStats(role=role, series=series)


def test_idle_core_seconds_by_phase() -> None:
    start = 100.0
    procs = {
        1: _proc("driver", [(100.0, 0.0), (101.0, 1.0), (106.0, 1.0), (107.0, 2.0)]),
        # two workers busy for 4 s, then only one for 1 s (the stream's last part)
        2: _proc("worker", [(101.0, 0.0), (105.0, 4.0), (106.0, 5.0)]),
        3: _proc("worker", [(101.0, 0.0), (105.0, 4.0), (106.0, 4.0)]),
        4: _proc("raylet", [(100.0, 0.0), (107.0, 0.0)]),
    }
    binned = bins(procs, start, 107.0)
    assert len(binned) == 7
    assert binned[0]["driver"] == 1.0 and binned[2]["worker"] == 2.0
    assert binned[5] == {**binned[5], "worker": 1.0, "active_workers": 1.0}
    spans = [["stream", 101.0, 106.0], ["dedup-aggregate", 106.0, 107.0]]
    segs = segments(spans, start, 107.0)
    assert [s[0] for s in segs] == ["start", "stream", "dedup-aggregate"]
    segs = split_tail(segs, binned, start, cores=2)
    assert ("stream-tail", 105.0, 106.0) in segs
    phases = by_phase(segs, binned, start, cores=2)
    assert phases["start"]["idle_core_s"] == 1.0  # the driver alone for 1 s
    assert phases["stream"]["idle_core_s"] == 0.0
    assert phases["stream-tail"]["idle_core_s"] == 1.0
    assert phases["dedup-aggregate"] == {**phases["dedup-aggregate"], "driver_cpu_s": 1.0}
    assert phases["dedup-aggregate"]["idle_core_s"] == 1.0


def test_gaps_between_phases_are_named() -> None:
    segs = segments([["a", 1.0, 2.0], ["b", 3.0, 4.0]], 0.0, 5.0)
    assert [s[0] for s in segs] == ["start", "a", "gap:a>b", "b", "end"]
