"""The data job's stream without Ray: the machine's ceiling for 1 -> 2 worker scaling (issue 13.4).

`bench_pipeline_scaling --runs plain` runs the SAME code the Ray stream runs in its tasks and
actors (`workers.read_files`, `workers.MapStagesWorker` with the dedup map side per piece, the
same piece and cost files) over the same input files, in N plain processes (multiprocessing,
spawn, no Ray), files dealt from one queue. What it leaves out is Ray: no raylet, GCS, object
store, Ray Data scheduling loop or per-task overhead. So its 1 -> 2 efficiency is what any
framework could get from these cores, and the gap to ours is what Ray costs us. The global
phases (dedup's aggregate and join) and the merge are not run: they are the fixed phases the
scaling row reports apart.

Start-up (spawning the processes, imports, building and setting up the stages) is timed apart:
each process reports ready, then all start together; `work_s` is the wall from that start to
the last result. Each process reports its own CPU-seconds (`resource.getrusage`) and the
CPU-seconds each stage measured (the records `throughput.record_batch` writes, summed here),
so per-stage CPU inflation at 2 processes can be set beside ours.

One difference from the Ray stream is kept: a plain process reads (WARC parsing) in the same
process as its stages, while Ray's read tasks run beside the stage actors (at 1 worker Ray's
stream already uses more than one core: the reads, the driver, Ray's own processes).
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 600.0


def _stage_specs(inputs: str, out: str) -> tuple[Any, list[dict[str, str]], dict[str, Any]]:
    """The default stages (configs/pipeline.yaml), the input files and the reader options the
    runner's stream would use for `inputs` -> `out`."""
    import yaml

    from data_pipeline import global_parts, ray_job
    from data_pipeline.config import PipelineConfig
    from data_pipeline.inputs import plan_inputs
    from data_pipeline.runner import build_stages

    repo = Path(__file__).resolve().parents[1]
    stages = yaml.safe_load((repo / "configs" / "pipeline.yaml").read_text())["stages"]
    config = PipelineConfig.model_validate({"inputs": [inputs], "output": out, "stages": stages})
    built = build_stages(config)
    head, _ = global_parts.plan(built)
    worker = {
        "specs": [s.spec() for s in head],
        "out": out,
        "batch_rows": config.batch_rows,
    }
    options = ray_job.read_options(config, built)
    files = [{"path": f.path, "format": f.format, "stem": f.stem} for f in plan_inputs([inputs])]
    return worker, files, options


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process(worker: dict[str, Any], options: dict[str, Any], out: str, queues: Any) -> None:
    """One plain worker: set up the stages, say ready, wait for the start, then take files."""
    import pyarrow as pa

    from data_pipeline import throughput, workers

    ready, go, todo, results = queues
    spent: dict[str, float] = {}
    record = throughput.record_batch

    def counted(target: Any, tag: str, batch: Any, cpu_s: dict[str, float]) -> None:
        for stage, seconds in cpu_s.items():
            spent[stage] = spent.get(stage, 0.0) + seconds
        record(target, tag, batch, cpu_s)

    throughput.record_batch = counted  # type: ignore[assignment]
    mapper = workers.MapStagesWorker(**worker)
    ready.put(_cpu_s())
    go.wait()
    begin_cpu, docs = _cpu_s(), 0
    while (item := todo.get()) is not None:
        for block in workers.read_files(
            pa.Table.from_pylist([item]), out=out, skip=frozenset(), options=options
        ):
            docs += mapper(block).column("rows").to_numpy().sum() if block.num_rows else 0
    results.put({"cpu_s": _cpu_s() - begin_cpu, "stages": spent, "docs": int(docs)})


def run_plain(inputs: str, out: str, processes: int) -> dict[str, Any]:
    """The stream of `inputs` -> `out` in `processes` plain processes; see the module doc."""
    worker, files, options = _stage_specs(inputs, out)
    context = multiprocessing.get_context("spawn")
    ready, todo, results = context.Queue(), context.Queue(), context.Queue()
    go = context.Event()
    for item in files:
        todo.put(item)
    for _ in range(processes):
        todo.put(None)
    begin = time.perf_counter()
    procs = [
        context.Process(target=_process, args=(worker, options, out, (ready, go, todo, results)))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    setup_cpu = [ready.get(timeout=READY_TIMEOUT_S) for _ in procs]
    startup = time.perf_counter() - begin
    go.set()
    done = [results.get(timeout=READY_TIMEOUT_S * 2) for _ in procs]
    work = time.perf_counter() - begin - startup
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a plain worker exited with {proc.exitcode}")
    stages: dict[str, float] = {}
    for result in done:
        for stage, seconds in result["stages"].items():
            stages[stage] = round(stages.get(stage, 0.0) + seconds, 3)
    return {
        "wall_s": startup + work,
        "ray_start_s": 0.0,
        "startup_s": round(startup, 3),
        "setup_cpu_s": round(sum(setup_cpu), 3),
        "work_s": work,
        "stages": stages,
        "stage_cpu_s": round(sum(stages.values()), 3),
        "process_cpu_s": round(sum(r["cpu_s"] for r in done), 3),
        "per_process_cpu_s": [round(r["cpu_s"], 2) for r in done],
        "docs": sum(r["docs"] for r in done),
    }


def plain_rows(plain: dict[int, dict[str, Any]], mb: float) -> dict[str, Any]:
    """The no-Ray baseline's rows: its 1 -> 2 efficiency (start-up apart) and CPU inflation."""
    one, two = plain[1], plain[2]
    return {
        "plain_scaling_efficiency_startup_excluded": round(one["work_s"] / two["work_s"] / 2, 3),
        "plain_work_s": {w: round(r["work_s"], 2) for w, r in plain.items()},
        "plain_startup_s": {w: r["startup_s"] for w, r in plain.items()},
        "plain_stage_cpu_ratio_2w_over_1w": round(two["stage_cpu_s"] / one["stage_cpu_s"], 3),
        "plain_process_cpu_ratio_2w_over_1w": round(two["process_cpu_s"] / one["process_cpu_s"], 3),
        "plain_stage_cpu_ratio_by_stage": {
            s: round(two["stages"][s] / one["stages"][s], 3)
            for s in one["stages"]
            if one["stages"][s] and s in two["stages"]
        },
        "plain_cores_used": {
            w: round(r["process_cpu_s"] / r["work_s"], 2) for w, r in plain.items()
        },
        "plain_mb_per_stage_cpu_s": {w: round(mb / r["stage_cpu_s"], 3) for w, r in plain.items()},
    }
