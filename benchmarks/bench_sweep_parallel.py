"""Sweep wall time: the README walkthrough's proxy sweep (configs/ablation_sample.yaml) run one at
a time (the baseline: what `parallel: auto` chose before) vs two side by side (`parallel: pool`,
one torch thread per run), same runs.

    python -m benchmarks.bench_sweep_parallel prepare WORK   # the walkthrough up to its sweep
    python -m benchmarks.bench_sweep_parallel WORK

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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


REPO = Path(__file__).resolve().parents[1]


def prepare(work: Path) -> None:
    """The README walkthrough's commands before `pretrain ablate`, in WORK (the repository's
    configs/, sample and task files linked in, as the block reads them from the root)."""
    sys.path.insert(0, str(REPO))
    from tests.test_walkthrough import walkthrough_commands

    work.mkdir(parents=True, exist_ok=True)
    for name in ("configs", "pretrain", "evals"):
        if not (work / name).exists():
            (work / name).symlink_to(REPO / name)
    bin_dir = Path(sys.executable).parent
    for command in walkthrough_commands():
        if command.startswith("pretrain ablate"):
            return
        subprocess.run(["bash", "-c", f"PATH={bin_dir}:$PATH {command}"], cwd=work, check=True)


def _sweep(
    work: Path, out: Path, parallel: str, runs_at_once: int, seeds: list[int]
) -> dict[str, Any]:
    from evals.ablation_plan import AblationConfig
    from evals.ablation_run import run_sweep, runs_dir
    from pretrain.config import load_config

    os.chdir(work)
    config = load_config(AblationConfig, "configs/ablation_sample.yaml", [f"out={out}"])
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
    parser.add_argument("work", nargs="+", help="WORK, or `prepare WORK`")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    if args.work[0] == "prepare":
        prepare(Path(args.work[1]).resolve())
        return 0
    work = Path(args.work[0]).resolve()
    one = _sweep(work, work / "runs" / "sweep-one", "sequential", 1, args.seeds)
    two = _sweep(work, work / "runs" / "sweep-two", "pool", 2, args.seeds)
    write_result(
        "sweep_parallel",
        {
            "claim": "walkthrough proxy sweep, 2 runs side by side vs 1 at a time, same runs",
            "cpus": os.cpu_count(),
            "baseline_one_at_a_time": one,
            "ours_two_at_once": two,
            "wall_speedup": round(one["wall_s"] / two["wall_s"], 2),
            "cpu_time_ratio": round(two["children_cpu_s"] / max(one["children_cpu_s"], 1e-9), 2),
            "same_decision": (one["chosen"], one["passed"]) == (two["chosen"], two["passed"]),
            "note": "shared 2-core machine (8 engineers): wall times depend on the load",
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
