"""bench_pipeline_scaling's rows: the 1 -> 2 worker rows from two points, and a one-point run
(the smoke run of tests/benchmarks/test_harness.py, `--workers 2`) reports its point without
them."""

from __future__ import annotations

from typing import Any

from benchmarks.bench_pipeline_scaling import summarise


def _run(work_s: float) -> dict[str, Any]:
    """The fields of `child_ours`'s result that the rows read."""
    phase = {"cpu_bound_s": work_s, "max_process_cpu_s": work_s, "system_cpu_s": 0.5}
    return {
        "wall_s": work_s + 1.0,
        "ray_start_s": 1.0,
        "work_s": work_s,
        "stage_cpu_s": 2 * work_s,
        "tree_cpu_s": 2 * work_s + 1,
        "phases_s": {"stream": work_s},
        "phase_cpu": {"stream": phase},
        "sampled_cpu_s_by_role": {"worker": 2 * work_s},
        "phase_cpu_by_role": {"stream": {"worker": 2 * work_s}},
    }


def test_two_points_give_the_scaling_rows_and_one_point_its_own() -> None:
    rows = summarise({1: _run(20.0), 2: _run(10.0)}, {}, mb=40.0)
    assert rows["ours_scaling_efficiency_startup_excluded"] == 1.0
    assert rows["ours_stream_scaling_efficiency"] == 1.0
    assert rows["target_met"] is True  # start-up 1/11 and 1/21 of the runs, under 10%
    assert rows["ours_2w"]["steady_mb_per_s_per_core"] == 2.0
    one = summarise({2: _run(10.0)}, {}, mb=40.0)
    assert one["ours_2w"] == rows["ours_2w"] and one["startup"] == {2: rows["startup"][2]}
    assert not any("scaling" in key for key in one) and "target_met" not in one
