"""End-to-end near-duplicate dedup: ours on Ray vs datatrove's four-stage MinHash pipeline with
its LocalPipelineExecutor, same worker count (2), same input, same run.

Input: N documents (default 100,000; benchmarks.bench_minhash.make_docs over `--corpus`: corpus
documents cycled with 3% of words replaced per copy) in 4 Parquet files. Both sides: word 5-grams,
14 bands x 9 rows, whitespace words (datatrove's fast setting). Timed, ours: the runner's path
(benchmarks.bench_dedup_memory.run_parts: a Ray task per file maps and persists it, the driver's
aggregate, a task per file joins its tags and writes every row); Ray start-up is timed and
reported apart, and so are the Ray workers' own start-ups (warmed before the first timed job).
Timed, datatrove: signatures -> buckets -> clusters -> filter + write of kept rows.
Also: the largest peak RSS of any Ray worker at 1/4 of the input and at the full input (4
partitions), and at the full input with 16 partitions (per-process memory follows input /
partitions: the map step hashes fixed-size batches, every reducer holds one partition).

    .venv/bin/python -m benchmarks.bench_dedup --corpus DIR [--docs 100000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.utils.word_tokenizers import WordTokenizer

from benchmarks import bench_minhash
from benchmarks.bench_dedup_memory import run_parts
from benchmarks.common import add_corpus_argument, corpus_dir, peak_rss_mb, timed, write_result
from benchmarks.proctree import TreeSampler
from pretrain import rayinit

WORKERS = 2
FILES = 4
BANDS, ROWS = 14, 9


class Whitespace(WordTokenizer):
    """datatrove's fast setting: whitespace words instead of spaCy (module level: picklable)."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]


def write_input(docs: list[str], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    per_file = (len(docs) + FILES - 1) // FILES
    for f in range(FILES):
        part = docs[f * per_file : (f + 1) * per_file]
        ids = [f"doc-{f * per_file + i:08d}" for i in range(len(part))]
        pq.write_table(pa.table({"id": ids, "text": part}), directory / f"part-{f}.parquet")
    return directory


def run_ours(ray, input_dir: Path, out_dir: Path, partitions: int) -> tuple[float, dict, dict]:
    """(wall seconds, the stage's stats, CPU-seconds of this process tree: the driver and Ray's
    workers apart from Ray's system processes)."""
    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.stages.dedup import DedupStage

    with TreeSampler(memory=False) as sampler:
        start = time.perf_counter()
        stage = DedupStage(DedupConfig(bands=BANDS, rows=ROWS, num_partitions=partitions))
        run_parts(ray, stage, input_dir, out_dir)
        wall = time.perf_counter() - start
    job = ("driver", "worker", "ray-data-actor")
    cpu = {"job": sampler.cpu_s(job), "ray_system": sampler.cpu_s() - sampler.cpu_s(job)}
    stats = {**stage.stats.as_dict(), "cost": stage.cost}
    return wall, stats, {k: round(v, 1) for k, v in cpu.items()}


def worker_peak(stats: dict) -> float:
    """Largest peak RSS of any Ray worker process so far (workers are reused: a running max)."""
    return stats["cost"]["peak_rss_mb"]


def start_ray():
    """A local Ray started the way a job starts it (pretrain.rayinit.connect: address="local",
    loopback only, its telemetry off) with its WORKERS worker processes started and the dedup
    code imported in them (start-up, not dedup work: timed apart)."""
    import ray

    rayinit.connect(None, num_cpus=WORKERS, object_store_mb=2048)

    @ray.remote(num_cpus=1)
    def touch() -> int:
        import data_pipeline.dedup.tasks  # noqa: F401

        time.sleep(1.0)
        return os.getpid()

    ray.get([touch.remote() for _ in range(WORKERS)])
    return ray


def run_datatrove(input_dir: Path, work: Path) -> tuple[float, float]:
    """(wall seconds, CPU-seconds of this process and its workers)."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    config = MinhashConfig(n_grams=5, num_buckets=BANDS, hashes_per_bucket=ROWS)
    logs = str(work / "logs")
    stages = [
        (
            [
                ParquetReader(str(input_dir)),
                MinhashDedupSignature(str(work / "sigs"), config=config, language=Whitespace()),
            ],
            FILES,
        ),
        ([MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=config)], BANDS),
        ([MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=config)], 1),
        (
            [
                ParquetReader(str(input_dir)),
                MinhashDedupFilter(str(work / "remove")),
                ParquetWriter(str(work / "out")),
            ],
            FILES,
        ),
    ]
    with TreeSampler(memory=False) as sampler:
        start = time.perf_counter()
        for i, (pipeline, tasks) in enumerate(stages):
            LocalPipelineExecutor(
                pipeline=pipeline,
                tasks=tasks,
                workers=min(WORKERS, tasks),
                logging_dir=f"{logs}/{i}",
            ).run()
        wall = time.perf_counter() - start
    return wall, sampler.cpu_s()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    add_corpus_argument(parser)
    args = parser.parse_args(argv if argv is not None else [])
    bench_minhash.CORPUS = corpus_dir(args.corpus)
    few, many = 2 * WORKERS, 8 * WORKERS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        docs = bench_minhash.make_docs(args.docs)
        full = write_input(docs, root / "full")
        quarter = write_input(docs[: args.docs // 4], root / "quarter")
        t_trove, cpu_trove = run_datatrove(full, root / "datatrove")
        t_ray_start, ray = timed(start_ray)
        # fresh workers: 1/4 of the input first, then all of it (peaks are running maxima)
        _, stats_quarter, _ = run_ours(ray, quarter, root / "ours-quarter", few)
        t_ours, stats, cpu_ours = run_ours(ray, full, root / "ours", few)
        rayinit.shutdown(True)
        ray = start_ray()
        _, stats_many, _ = run_ours(ray, full, root / "ours-many", many)
        rayinit.shutdown(True)
    result = {
        "documents": args.docs,
        "workers": WORKERS,
        "bands": BANDS,
        "rows": ROWS,
        "timed": "read Parquet (one Ray task per file) -> dedup -> write Parquet; Ray start-up "
        "and worker warm-up apart",
        "ours_s": round(t_ours, 2),
        "ray_startup_s": round(t_ray_start, 2),
        "datatrove_s": round(t_trove, 2),
        "speedup": round(t_trove / t_ours, 2),
        "ours_docs_per_s": round(args.docs / t_ours),
        "ours_cpu_s": cpu_ours,
        "datatrove_cpu_s": round(cpu_trove, 1),
        "cpu_ratio_datatrove_over_ours_job": round(cpu_trove / max(cpu_ours["job"], 1e-9), 2),
        "datatrove_docs_per_s": round(args.docs / t_trove),
        "target": 2.0,
        "ours_dropped": stats["dropped"],
        "ours_clusters": stats["clusters"],
        "worker_peak_rss_mb": {
            f"{args.docs // 4}_docs_{few}_partitions": worker_peak(stats_quarter),
            f"{args.docs}_docs_{few}_partitions": worker_peak(stats),
            f"{args.docs}_docs_{many}_partitions": worker_peak(stats_many),
        },
        "driver_peak_rss_mb": round(peak_rss_mb(), 1),
        "component_rounds": stats["extra"]["component_rounds"],
        "partitions_used": {
            "quarter": stats_quarter["extra"]["plan"].get("partitions"),
            "full": stats["extra"]["plan"].get("partitions"),
            "full_many": stats_many["extra"]["plan"].get("partitions"),
        },
        "same_result_with_more_partitions": stats_many["dropped"] == stats["dropped"],
        "cpu_count": os.cpu_count(),
    }
    print(
        f"ours {t_ours:.1f}s (+{t_ray_start:.1f}s Ray start), datatrove {t_trove:.1f}s: "
        f"{result['speedup']}x"
    )
    write_result("dedup", result)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
