"""Sweep wall time: the demo's proxy sweep run one at a time (the baseline: what `parallel: auto`
chose before) vs two side by side (`parallel: pool`, one torch thread per run), same runs.

    python -m benchmarks.bench_sweep_parallel DEMO_OUT   # a `pretrain demo` output directory

Both sweeps start from empty run directories (nothing cached) and train the same recipes, seeds
and budget. Wall time and the CPU time of the runs (children's user + system) are reported: on a
shared machine the wall ratio depends on the load, the CPU time says whether the runs did the
same work. Writes benchmarks/results/sweep_parallel.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sweep(
    demo_out: Path, work: Path, parallel: str, runs_at_once: int, seeds: list[int]
) -> dict[str, Any]:
    from evals.demo import _sweep_config
    from evals.sweep import run_sweep, runs_dir
    from pretrain_app.demo import DemoContext

    ctx = DemoContext(out=work)
    ctx.artifacts["tokenizer"] = demo_out / "tokenizer"
    config = _sweep_config(ctx, demo_out / "mixture", demo_out / "evalsets")
    config = config.model_copy(
        update={
            "parallel": parallel,
            "max_parallel": runs_at_once,
            "confirm_predictions": False,
            "seeds": seeds,
        }
    )
    shutil.rmtree(config.out, ignore_errors=True)
    shutil.rmtree(runs_dir(config), ignore_errors=True)
    load = os.getloadavg()[0]
    cpu, start = _children_cpu(), time.perf_counter()
    report = run_sweep(config)
    return {
        "parallel": parallel,
        "runs_at_once": runs_at_once,
        "runs": len(report["runs"]),
        "wall_s": round(time.perf_counter() - start, 1),
        "children_cpu_s": round(_children_cpu() - cpu, 1),
        "load_average_at_start": round(load, 1),
        "chosen": report["chosen_recipe_name"],
        "passed": report["passed"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo_out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("benchmarks/results/.sweep_parallel"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    demo_out = args.demo_out.resolve()
    one = _sweep(demo_out, (args.work / "one").resolve(), "sequential", 1, args.seeds)
    two = _sweep(demo_out, (args.work / "two").resolve(), "pool", 2, args.seeds)
    write_result(
        "sweep_parallel",
        {
            "claim": "demo proxy sweep, 2 runs side by side vs 1 at a time, same runs",
            "cpus": os.cpu_count(),
            "baseline_one_at_a_time": one,
            "ours_two_at_once": two,
            "wall_speedup": round(one["wall_s"] / two["wall_s"], 2),
            "cpu_time_ratio": round(two["children_cpu_s"] / max(one["children_cpu_s"], 1e-9), 2),
            "same_decision": (one["chosen"], one["passed"]) == (two["chosen"], two["passed"]),
            "note": "shared 2-core machine (8 engineers): wall times depend on the load",
        },
    )
    shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
