"""benchmarks.bench_ray_overhead splits each CPU delta by the manifest phase it fell in, and lists
the worker processes Ray started inside the measured work with the CPU of their start alone."""

from __future__ import annotations

from benchmarks.bench_ray_overhead import RoleSampler, by_phase, phase_of

SPANS = [["stream", 100.0, 110.0], ["dedup-map", 110.0, 111.0], ["merge", 112.0, 113.0]]


def test_phase_of_names_start_gaps_and_end() -> None:
    assert phase_of(99.9, SPANS) == "before-stream"
    assert phase_of(100.0, SPANS) == "stream"
    assert phase_of(111.5, SPANS) == "dedup-map"  # a gap belongs to the phase before it
    assert phase_of(112.5, SPANS) == "merge"
    assert phase_of(113.1, SPANS) == "end"


def test_work_excludes_start_up_and_fresh_workers_count_only_their_start() -> None:
    sampler = RoleSampler()
    warm, fresh = 11, 22
    sampler.first_seen = {warm: 95.0, fresh: 112.2}
    sampler.history = {
        warm: [(0.0, "worker:idle"), (10.0, "worker:task:read")],
        fresh: [(17.2, "worker:starting"), (17.4, "worker:idle"), (17.6, "worker:task:merge")],
    }
    sampler.charges = [
        (96.0, warm, "worker:idle", 1.0),  # start-up: not work
        (101.0, warm, "worker:task:read", 2.0),
        (112.3, fresh, "worker:starting", 0.5),
        (112.4, fresh, "worker:idle", 0.25),
        (112.6, fresh, "worker:task:merge", 0.75),
        (112.8, fresh, "worker:idle", 0.125),  # idle after its first task: not its start
    ]
    got = by_phase(sampler, SPANS)
    assert got["work_cpu_s"] == 3.62  # 2.0 + 0.5 + 0.25 + 0.75 + 0.125, rounded
    assert got["cpu_s_by_phase"]["before-stream"] == {"worker": 1.0}
    assert got["cpu_s_by_phase"]["merge"] == {"worker": 1.62}
    assert got["fresh_workers_in_work"] == [
        {
            "phase": "merge",
            "roles": ["worker:idle", "worker:starting", "worker:task:merge"],
            "cpu_s": 1.62,
            "start_cpu_s": 0.75,
        }
    ]
    assert got["fresh_workers_in_work_start_cpu_s"] == 0.75
