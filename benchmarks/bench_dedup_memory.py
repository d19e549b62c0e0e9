"""Dedup memory and CPU at 1x, 4x and 16x the input: ours on Ray under a per-worker memory budget
vs datasketch's MinHashLSH on the same documents; RSS of EVERY process, not only the driver.

Input: `--docs` x 16 documents built from the development corpus (`--corpus`;
benchmarks.bench_minhash.make_docs: its documents of 500-8,000 characters, cycled with 3% of the
words replaced per copy), the first 1x, 4x, 16x of them written as Parquet files of `--docs`/4
documents (4 / 16 / 64 files: the runner cuts its input into parts of `shard_rows` rows, so a
larger input has more parts).
Both sides: word 5-grams, 128 permutations, threshold 0.8.

- ours: a FRESH local Ray (`--workers` CPUs) per scale, so no scale's peak carries what an
  earlier scale's workers kept (one shared Ray moved the 1x -> 16x slope by ~3 KB/doc between
  runs). Per scale: start-up (reported apart), a warm-up job on `WARMUP_DOCS` documents (a job's
  fixed cost: worker start, imports, task submission), then the idle tree (Ray's fixed
  per-process cost: GCS, raylet, agents, warm workers) is sampled, then the timed job, with
  `ray.worker_memory_mb` = `--budget-mb`. Memory per additional document is the slope of (peak
  total PSS - that scale's idle total) between 1x and 16x. The job is dedup's one path, the
  runner's (data_pipeline.global_parts): one Ray task per input file maps it
  (`DedupStage.map_part`) and persists the map tables; the driver runs `DedupStage.aggregate`
  over the persisted parts; one task per file joins the tags (`join_part`) and writes the tagged
  file. No document sits in the object store; the aggregate's pieces go through files.
  For the sample with the largest total PSS, `at_peak` says which dedup step was running and
  each role's PSS, with the object store's pages (/dev/shm mappings) apart.
- datasketch 2.0.0: one process (a child of this one) streams the same Parquet in batches of
  1,024: MinHash.bulk, then per document `query` (a hit = a duplicate) and `insert`.

Every process of the tree is sampled every 0.5 s (benchmarks.proctree): per-process peak RSS,
the tree's peak total PSS (shared object-store pages counted once), CPU seconds per process.
Memory per additional document is the slope of the peak total between 1x and 16x; CPU per
additional document likewise (the steady-state marginal cost, without a job's fixed cost).
Also: the slope of the job's own processes' PSS at the peak (driver, workers, Ray Data's
actors; no idle snapshot subtracted, which moved by up to 130 MB between scales), and of the
largest worker peak RSS beside datasketch's process's. Our CPU leaves out the sampler's own
(it runs in the driver: `cpu_s_sampler`).

    .venv/bin/python -m benchmarks.bench_dedup_memory --corpus DIR [--docs 2500] [--budget-mb 512]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import bench_minhash
from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from benchmarks.dedup_baseline import run_datasketch
from benchmarks.proctree import MB, TreeSampler, idle_snapshot, summarise_peak

SCALES = (1, 4, 16)
FILES = 4
WARMUP_DOCS = 64


def write_input(docs: list[str], directory: Path, per_file: int | None = None) -> Path:
    """`FILES` Parquet files, or files of `per_file` documents (the runner's parts: a larger
    input has more parts of `shard_rows` rows, not larger ones)."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = per_file or (len(docs) + FILES - 1) // FILES
    for f in range((len(docs) + per_file - 1) // per_file):
        part = docs[f * per_file : (f + 1) * per_file]
        ids = [f"doc-{f * per_file + i:08d}" for i in range(len(part))]
        pq.write_table(pa.table({"id": ids, "text": part}), directory / f"part-{f:05d}.parquet")
    return directory


def _warm(ray, workers: int) -> None:
    """Start the worker processes and import the dedup code in them (part of the fixed cost)."""

    @ray.remote(num_cpus=1)
    def touch() -> int:
        import data_pipeline.dedup.tasks  # noqa: F401

        time.sleep(1.0)
        return os.getpid()

    ray.get([touch.remote() for _ in range(workers)])


def start_ray(workers: int) -> tuple[float, TreeSampler]:
    """Start a local Ray the way a job does (pretrain.rayinit.connect: address="local", loopback
    only, its telemetry off, start-up retried on a loaded machine), warm its workers; returns
    (start-up seconds, one sample of the idle tree: Ray's fixed per-process cost)."""
    import ray

    from pretrain import rayinit

    start = time.perf_counter()
    rayinit.connect(None, num_cpus=workers)
    _warm(ray, workers)
    return time.perf_counter() - start, idle_snapshot()


def fixed_cost(directory: Path, docs: list[str], budget_mb: int) -> tuple[dict, TreeSampler]:
    """A dedup job on WARMUP_DOCS documents (what any job costs before its first document:
    Ray Data's actors, task submission, the stage's set-up), then the idle tree after it."""
    inputs = write_input(docs[:WARMUP_DOCS], directory / "in")
    job = run_ours(inputs, directory / "out", budget_mb)
    return {k: v for k, v in job.items() if k != "dropped"}, idle_snapshot()


def _dedup_stage(budget_mb: int):
    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.stages.dedup import DedupStage

    return DedupStage(DedupConfig(), worker_memory_mb=budget_mb)


def run_parts(ray, stage, input_dir: Path, out_dir: Path) -> None:
    """The runner's path (data_pipeline.global_parts): one task per input file maps it
    (`map_part`) and persists the tables; the driver aggregates over the persisted parts; one task
    per file joins its tags (`join_part`) and writes it. No document sits in the object store."""
    from data_pipeline.stage_types import MapOutput

    maps, out_dir = out_dir / "maps", out_dir / "tagged"
    maps.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)

    @ray.remote(num_cpus=1)
    def map_file(path: str, part: str) -> tuple[dict[str, str], dict]:
        tables, info = stage.map_part(pq.read_table(path))
        files = {name: str(maps / f"{part}.{name}.parquet") for name in tables}
        for name, table in tables.items():
            pq.write_table(table, files[name], compression="lz4")
        return files, info

    @ray.remote(num_cpus=1)
    def join_file(path: str, index: int, *args) -> int:
        table = stage.join_part(pq.read_table(path), {}, index, *args)
        pq.write_table(table, out_dir / f"part-{index:05d}.parquet")
        return table.num_rows

    files = sorted(str(f) for f in input_dir.glob("*.parquet"))
    mapped = ray.get([map_file.remote(f, f"part-{i:05d}") for i, f in enumerate(files)])
    parts = [
        MapOutput(f"part-{i:05d}", rows=f, files=m, info=info)
        for i, (f, (m, info)) in enumerate(zip(files, mapped))
    ]
    joins = stage.aggregate(parts)
    ray.get([join_file.remote(f, i, *joins[i]) for i, f in enumerate(files)])


def run_ours(input_dir: Path, out_dir: Path, budget_mb: int) -> dict:
    """One dedup job on the running Ray (the runner's path, run_parts), every process of the tree
    sampled."""
    import ray

    stage = _dedup_stage(budget_mb)
    with TreeSampler(breakdown=True) as sampler:
        wall = time.perf_counter()
        run_parts(ray, stage, input_dir, out_dir)
        out_dir = out_dir / "tagged"
        wall = time.perf_counter() - wall
    keep = pq.read_table(out_dir, columns=["id", "dup_keep"])
    dropped = keep.filter(pa.compute.invert(keep.column("dup_keep"))).column("id").to_pylist()
    return {
        **_job_costs(sampler, stage, wall),
        "at_peak": {
            "step": step_at(getattr(stage, "timeline", []), sampler.at_peak.get("unix_time", 0)),
            "total_pss_mb": round(sampler.at_peak.get("total_pss_mb", 0.0), 1),
            "by_role": summarise_peak(sampler.at_peak),
        },
        "dropped": sorted(dropped),
    }


def _job_costs(sampler: TreeSampler, stage, wall: float) -> dict:
    """`cpu_s_in_dedup_tasks`: the dedup aggregate's own Ray tasks (not the map and join tasks).
    `cpu_s_driver_and_workers` leaves out the sampler's own CPU (`cpu_s_sampler`: it runs in
    the driver, reading every process's smaps twice a second; before 2026-12-04 it was counted
    as ours, while datasketch's sampler runs outside the process it measures)."""
    job_roles = ("driver", "worker", "ray-data-actor")
    return {
        "wall_s": round(wall, 2),
        "cpu_s_driver_and_workers": round(sampler.cpu_s(job_roles) - sampler.own_cpu_s, 2),
        "cpu_s_sampler": round(sampler.own_cpu_s, 2),
        "cpu_s_in_dedup_tasks": round(stage.cost["cpu_s"], 2),
        "cpu_s_ray_data_actors": round(sampler.cpu_s(("ray-data-actor",)), 2),
        "worker_processes_started": sampler.started(("worker", "ray-data-actor")),
        "cpu_s_ray_system": round(sampler.cpu_s() - sampler.cpu_s(job_roles), 2),
        "peak_total_pss_mb": round(sampler.peak_total_pss_mb, 1),
        "peak_total_rss_mb": round(sampler.peak_total_rss_mb, 1),
        "by_role": sampler.by_role(),
        "worker_peak_rss_mb": max(
            (s.peak_rss_mb for s in sampler.procs.values() if s.role == "worker"), default=0.0
        ),
        "plan": stage.stats.extra.get("plan"),
    }


def step_at(timeline: list[tuple[str, float]], when: float) -> str:
    """The dedup step running at Unix time `when` (the first to finish after it): `read` before
    the dedup's first task, `write` after its last."""
    if not timeline or when < timeline[0][1]:
        return "read"
    return next((step for step, end in timeline[1:] if end >= when), "write")


def _job_pss_at_peak(run: dict) -> float:
    roles = run["at_peak"]["by_role"]
    return sum(roles.get(r, {}).get("pss_mb", 0.0) for r in ("driver", "worker", "ray-data-actor"))


def _slope(points: dict[int, float], docs: dict[int, int], unit: float = MB) -> float:
    """Per additional document, between the smallest and the largest scale (MB -> bytes)."""
    low, high = min(points), max(points)
    return (points[high] - points[low]) * unit / max(1, docs[high] - docs[low])


def summarise(ours: dict, trove: dict, docs: dict[int, int], budget_mb: int, warm: dict) -> dict:
    """The comparison rows: CPU-seconds per document, bytes per additional document, budget."""
    top = max(docs)
    fixed = warm["cpu_s_driver_and_workers"]
    ours_job = {s: ours[s]["peak_total_pss_mb"] - ours[s]["idle_total_pss_mb"] for s in ours}
    agree = {
        s: len(set(ours[s]["dropped"]) & set(trove[s]["dropped"]))
        / max(1, len(set(ours[s]["dropped"]) | set(trove[s]["dropped"])))
        for s in ours
    }
    return {
        "ours_cpu_s_per_doc": round(ours[top]["cpu_s_driver_and_workers"] / docs[top], 6),
        "ours_cpu_s_per_doc_with_ray_system": round(
            (ours[top]["cpu_s_driver_and_workers"] + ours[top]["cpu_s_ray_system"]) / docs[top], 6
        ),
        "ours_cpu_s_per_doc_less_fixed_job_cost": round(
            (ours[top]["cpu_s_driver_and_workers"] - fixed) / docs[top], 6
        ),
        "ours_cpu_s_per_doc_in_dedup_tasks": round(
            ours[top]["cpu_s_in_dedup_tasks"] / docs[top], 6
        ),
        "datasketch_cpu_s_per_doc": round(trove[top]["cpu_s"] / docs[top], 6),
        "ours_cpu_s_per_additional_doc_in_dedup_tasks": round(
            _slope({k: v["cpu_s_in_dedup_tasks"] for k, v in ours.items()}, docs, 1), 6
        ),
        # the slope between the smallest and the largest scale: what one more document costs,
        # without the fixed cost of a job (Ray task and dataset set-up, imports in the child)
        "ours_cpu_s_per_additional_doc": round(
            _slope({k: v["cpu_s_driver_and_workers"] for k, v in ours.items()}, docs, 1), 6
        ),
        "datasketch_cpu_s_per_additional_doc": round(
            _slope({k: v["cpu_s"] for k, v in trove.items()}, docs, 1), 6
        ),
        "ours_bytes_per_additional_doc": round(_slope(ours_job, docs)),
        # the job's own processes (driver, workers, Ray Data's actors) at the tree's peak: Ray's
        # GCS, raylet and agents left out instead of an idle snapshot subtracted (the idle total
        # moved by up to 130 MB between scales, 9 KB/doc of the slope above)
        "ours_bytes_per_additional_doc_job_processes": round(
            _slope({s: _job_pss_at_peak(ours[s]) for s in ours}, docs)
        ),
        "ours_worker_peak_rss_bytes_per_additional_doc": round(
            _slope({s: ours[s]["worker_peak_rss_mb"] for s in ours}, docs)
        ),
        "datasketch_peak_rss_bytes_per_additional_doc": round(
            _slope({s: trove[s]["peak_rss_mb"] for s in trove}, docs)
        ),
        "ours_bytes_per_additional_doc_total_pss": round(
            _slope({s: ours[s]["peak_total_pss_mb"] for s in ours}, docs)
        ),
        "datasketch_bytes_per_additional_doc": round(
            _slope({s: trove[s]["peak_pss_mb"] for s in trove}, docs)
        ),
        "worker_peak_rss_mb_by_scale": {s: ours[s]["worker_peak_rss_mb"] for s in ours},
        "worker_peak_uss_mb_by_scale": {
            s: ours[s]["by_role"].get("worker", {}).get("max_peak_uss_mb") for s in ours
        },
        "worker_processes_started_by_scale": {s: ours[s]["worker_processes_started"] for s in ours},
        "under_budget_at_every_scale": all(ours[s]["worker_peak_rss_mb"] < budget_mb for s in ours),
        "dropped_by_scale": {
            s: {"ours": len(ours[s]["dropped"]), "datasketch": len(trove[s]["dropped"])}
            for s in ours
        },
        "dropped_jaccard_agreement": {s: round(v, 4) for s, v in agree.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=2500, help="documents at 1x")
    parser.add_argument("--budget-mb", type=int, default=512, help="ray.worker_memory_mb")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scales", default=",".join(map(str, SCALES)))
    args = parser.parse_args(argv if argv is not None else [])
    bench_minhash.CORPUS = corpus_dir(args.corpus)
    scales = [int(s) for s in args.scales.split(",")]
    all_docs = bench_minhash.make_docs(args.docs * max(scales))
    docs = {s: args.docs * s for s in scales}
    ours, trove = {}, {}
    from pretrain import rayinit

    with tempfile.TemporaryDirectory() as tmp:
        per_file = args.docs // FILES
        inputs = {
            s: write_input(all_docs[: docs[s]], Path(tmp) / f"in-{s}x", per_file) for s in scales
        }
        for s in scales:  # before Ray starts: the tree is this process and the baseline's
            trove[s] = run_datasketch(inputs[s])
            print(f"{s}x: datasketch {trove[s]['wall_s']} s, {trove[s]['cpu_s']} CPU-s")
        for s in scales:  # a fresh Ray per scale: no scale sees what an earlier one's workers kept
            startup_s, _ = start_ray(args.workers)
            warmup, idle = fixed_cost(Path(tmp) / f"warm-{s}x", all_docs, args.budget_mb)
            out = Path(tmp) / f"out-{s}x"
            ours[s] = run_ours(inputs[s], out, args.budget_mb)
            ours[s]["idle_total_pss_mb"] = round(idle.peak_total_pss_mb, 1)
            ours[s]["ray_startup_s"] = round(startup_s, 2)
            print(f"{s}x: ours {ours[s]['wall_s']} s, {ours[s]['cpu_s_driver_and_workers']} CPU-s")
            rayinit.shutdown(True)
    result = {
        "documents_by_scale": docs,
        "text_mb_by_scale": {s: round(sum(map(len, all_docs[: docs[s]])) / 1e6, 1) for s in scales},
        "budget_mb": args.budget_mb,
        "workers": args.workers,
        "path": "parts",
        "exchange": "files",
        "ray_startup_s_by_scale": {k: v["ray_startup_s"] for k, v in ours.items()},
        "ray_fixed_cost_idle": {"total_pss_mb": round(idle.peak_total_pss_mb, 1), **idle.by_role()},
        "fixed_cost_job": {"documents": WARMUP_DOCS, **warmup},
        "cpu_count": os.cpu_count(),
        "machine_shared": "yes: 2 cores shared by 8 engineers; CPU seconds are the fairer measure",
        **summarise(ours, trove, docs, args.budget_mb, warmup),
        "ours": {s: {k: v for k, v in r.items() if k != "dropped"} for s, r in ours.items()},
        "datasketch": {s: {k: v for k, v in r.items() if k != "dropped"} for s, r in trove.items()},
    }
    write_result("dedup_memory", result)


if __name__ == "__main__":
    main(sys.argv[1:])
