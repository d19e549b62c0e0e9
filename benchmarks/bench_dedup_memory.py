"""Dedup memory and CPU at 1x, 4x and 16x the input: ours on Ray under a per-worker memory budget
vs datasketch's MinHashLSH on the same documents; RSS of EVERY process, not only the driver.

Input: `--docs` x 16 documents built from the development corpus (`--corpus`;
benchmarks.bench_minhash.make_docs: its documents of 500-8,000 characters, cycled with 3% of the
words replaced per copy), written as 4 Parquet files per scale (the first 1x, 4x, 16x of them).
Both sides: word 5-grams, 128 permutations, threshold 0.8.

- ours: one local Ray (`--workers` CPUs); its idle cost once started and warmed (Ray's fixed
  per-process overhead: GCS, raylet, agents, idle workers, after a warm-up job on `WARMUP_DOCS`
  documents whose cost is the fixed cost of a job) is sampled and reported apart, with the
  start-up time. Timed and sampled per scale (smallest first, workers reused): read Parquet (one
  Ray task per file) -> DedupStage.apply (exact verification, the default) -> write tagged
  Parquet (one Ray task per block: Ray Data's `write_parquet` bundled the blocks into one write
  task and started its two bookkeeping actors), with `ray.worker_memory_mb` = `--budget-mb`.
  For the sample with the largest total PSS, `at_peak` says which dedup step was running and
  each role's PSS, with the object store's pages (/dev/shm mappings) apart. The input is NOT read with `ray.data.read_parquet`: Ray 2.60's Parquet reader
  starts up to 32 `FooterReader` actor processes per read (RAY_DATA_PARQUET_FOOTER_NUM_ACTORS) and
  kills them after listing; that was the "16-31 worker processes started and reaped per job" of
  the earlier rows (~1.2 CPU-s of interpreter start-up each), not dedup's own work.
- datasketch 2.0.0: one process (a child of this one) streams the same Parquet in batches of
  1,024: MinHash.bulk, then per document `query` (a hit = a duplicate) and `insert`.

Every process of the tree is sampled every 0.5 s (benchmarks.proctree): per-process peak RSS,
the tree's peak total PSS (shared object-store pages counted once), CPU seconds per process.
Memory per additional document is the slope of the peak total between 1x and 16x; CPU per
additional document likewise (the steady-state marginal cost, without a job's fixed cost).

    .venv/bin/python -m benchmarks.bench_dedup_memory --corpus DIR [--docs 2500] [--budget-mb 512]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import bench_minhash
from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from benchmarks.proctree import MB, TreeSampler, idle_snapshot, summarise_peak

SCALES = (1, 4, 16)
FILES = 4
WARMUP_DOCS = 64
NUM_PERM, THRESHOLD = 128, 0.8


def write_input(docs: list[str], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    per_file = (len(docs) + FILES - 1) // FILES
    for f in range(FILES):
        part = docs[f * per_file : (f + 1) * per_file]
        ids = [f"doc-{f * per_file + i:08d}" for i in range(len(part))]
        pq.write_table(pa.table({"id": ids, "text": part}), directory / f"part-{f}.parquet")
    return directory


def _warm(ray, workers: int) -> None:
    """Start the worker processes and import the dedup code in them (part of the fixed cost)."""

    @ray.remote(num_cpus=1)
    def touch() -> int:
        import data_pipeline.dedup.tasks  # noqa: F401

        time.sleep(1.0)
        return os.getpid()

    ray.get([touch.remote() for _ in range(workers)])


def read_input(ray, directory: Path):
    """A dataset of the input's Parquet files, one Ray task reading each (see the docstring for
    why not ray.data.read_parquet)."""
    import ray.data

    read = ray.remote(num_cpus=1)(pq.read_table)
    files = sorted(str(f) for f in directory.glob("*.parquet"))
    return ray.data.from_arrow_refs([read.remote(f) for f in files])


def write_output(ray, dataset, directory: Path) -> None:
    """Write each tagged block to its own file, one Ray task per block (as the input is read;
    Ray Data's `write_parquet` bundled the blocks of a run into one write task, whose worker then
    held the whole output: harness cost, not dedup's)."""
    directory.mkdir(parents=True, exist_ok=True)

    @ray.remote(num_cpus=1)
    def write(table, path: str) -> int:
        pq.write_table(table, path)
        return table.num_rows

    refs = dataset.to_arrow_refs()
    ray.get(
        [write.remote(ref, str(directory / f"part-{i:05d}.parquet")) for i, ref in enumerate(refs)]
    )


def start_ray(workers: int, attempts: int = 3) -> tuple[float, TreeSampler]:
    """Start a local Ray (retried: start-up can time out on a loaded machine), warm its workers;
    returns (start-up seconds, one sample of the idle tree: Ray's fixed per-process cost)."""
    import ray

    for attempt in range(attempts):
        start = time.perf_counter()
        try:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            break
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception on a start-up timeout
            ray.shutdown()
            if attempt == attempts - 1:
                raise
    _warm(ray, workers)
    return time.perf_counter() - start, idle_snapshot()


def fixed_cost(directory: Path, docs: list[str], budget_mb: int) -> tuple[dict, TreeSampler]:
    """A dedup job on WARMUP_DOCS documents (what any job costs before its first document:
    Ray Data's actors, task submission, the stage's set-up), then the idle tree after it."""
    job = run_ours(write_input(docs[:WARMUP_DOCS], directory / "in"), directory / "out", budget_mb)
    return {k: v for k, v in job.items() if k != "dropped"}, idle_snapshot()


def run_ours(input_dir: Path, out_dir: Path, budget_mb: int) -> dict:
    """One dedup job on the running Ray, every process of the tree sampled."""
    import ray

    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.stages.dedup import DedupStage

    stage = DedupStage(DedupConfig(), worker_memory_mb=budget_mb)
    with TreeSampler(breakdown=True) as sampler:
        wall = time.perf_counter()
        write_output(ray, stage.apply(read_input(ray, input_dir)), out_dir)
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
    job_roles = ("driver", "worker", "ray-data-actor")
    return {
        "wall_s": round(wall, 2),
        "cpu_s_driver_and_workers": round(sampler.cpu_s(job_roles), 2),
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


def _shingles(text: str) -> list[bytes]:
    words = bench_minhash._WORD.findall(text.lower())
    if len(words) < 5:
        return [" ".join(words).encode()] if words else []
    return [" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)]


def datasketch_child(input_dir: str) -> None:
    """The baseline, in its own process: stream, MinHash.bulk, query then insert every doc."""
    import psutil
    import pyarrow.dataset as pads
    from datasketch import MinHash, MinHashLSH

    base_rss = psutil.Process().memory_info().rss / MB
    cpu = time.process_time()
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    dropped = []
    for batch in pads.dataset(input_dir).to_batches(columns=["id", "text"], batch_size=1024):
        ids, texts = batch.column("id").to_pylist(), batch.column("text").to_pylist()
        for key, m in zip(ids, MinHash.bulk([_shingles(t) for t in texts], num_perm=NUM_PERM)):
            if lsh.query(m):
                dropped.append(key)
            lsh.insert(key, m, check_duplication=False)
    print(
        json.dumps(
            {
                "base_rss_mb": round(base_rss, 1),
                "cpu_s_self": round(time.process_time() - cpu, 2),
                "bands_rows": [lsh.b, lsh.r],
                "dropped": sorted(dropped),
            }
        )
    )


def run_datasketch(input_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    cmd = [sys.executable, "-m", "benchmarks.bench_dedup_memory", "--datasketch-child"]
    with TreeSampler() as sampler:
        wall = time.perf_counter()
        proc = subprocess.Popen([*cmd, str(input_dir)], stdout=subprocess.PIPE, text=True, env=env)
        stdout, _ = proc.communicate()
        wall = time.perf_counter() - wall
    if proc.returncode:
        raise SystemExit(f"datasketch baseline failed (exit {proc.returncode})")
    child = json.loads(stdout.strip().splitlines()[-1])
    procs = [sampler.procs[proc.pid]] if proc.pid in sampler.procs else []
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(sum(s.cpu_s for s in procs), 2),
        "peak_rss_mb": round(max(s.peak_rss_mb for s in procs), 1),
        "peak_pss_mb": round(max(s.peak_pss_mb for s in procs), 1),
        **child,
    }


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
    parser.add_argument("--datasketch-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.datasketch_child:
        datasketch_child(args.datasketch_child)
        return
    bench_minhash.CORPUS = corpus_dir(args.corpus)
    scales = [int(s) for s in args.scales.split(",")]
    all_docs = bench_minhash.make_docs(args.docs * max(scales))
    docs = {s: args.docs * s for s in scales}
    ours, trove = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        inputs = {s: write_input(all_docs[: docs[s]], Path(tmp) / f"in-{s}x") for s in scales}
        for s in scales:  # before Ray starts: the tree is this process and the baseline's
            trove[s] = run_datasketch(inputs[s])
            print(f"{s}x: datasketch {trove[s]['wall_s']} s, {trove[s]['cpu_s']} CPU-s")
        startup_s, _ = start_ray(args.workers)
        warmup, idle = fixed_cost(Path(tmp) / "warm", all_docs, args.budget_mb)
        for s in scales:  # smallest first: a reused worker starts no larger than the run before
            ours[s] = run_ours(inputs[s], Path(tmp) / f"out-{s}x", args.budget_mb)
            ours[s]["idle_total_pss_mb"] = round(idle.peak_total_pss_mb, 1)
            print(f"{s}x: ours {ours[s]['wall_s']} s, {ours[s]['cpu_s_driver_and_workers']} CPU-s")
        import ray

        ray.shutdown()
    result = {
        "documents_by_scale": docs,
        "text_mb_by_scale": {s: round(sum(map(len, all_docs[: docs[s]])) / 1e6, 1) for s in scales},
        "budget_mb": args.budget_mb,
        "workers": args.workers,
        "ray_startup_s": round(startup_s, 2),
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
