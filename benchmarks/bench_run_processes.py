"""How many Ray worker processes `pretrain data run` keeps alive at once, per phase, against the
CPUs it was given, and what they hold (summed RSS): does a fractional-CPU task over-subscribe?

The job: JSONL documents from the development corpus (`--corpus`: its web and en files, the first
`--docs` records each) through extract -> langid -> dedup (a global stage) -> the merge, with small
shards (`--shard-rows`) so the merge has many tasks, on a local Ray of `--cpus` CPUs started by
the job itself. The process tree of this process is sampled every 0.2 s (benchmarks.proctree
roles): Ray workers and Ray Data actors alive at once, their summed RSS, per phase (the phase is
the one the runner entered last: stream, global stage, merge). Run once per merge reservation
given (`--merge-cpus`, default `ray_job.MERGE_CPUS` and 1.0): the same job, the same output
bytes (checked), the merge's CPU-seconds and wall.

    .venv/bin/python -m benchmarks.bench_run_processes --corpus DIR [--docs 400] [--cpus 2]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from benchmarks.proctree import role

WORKER_ROLES = ("worker", "ray-data-actor")


class PhaseSampler:
    """Per phase: the most worker processes alive at once and the most RSS they held together."""

    def __init__(self) -> None:
        self.phase = "start-up"
        self.peaks: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.driver = psutil.Process()

    def _sample(self) -> None:
        alive, rss = 0, 0.0
        for proc in self.driver.children(recursive=True):
            try:
                if proc.status() == psutil.STATUS_ZOMBIE or role(proc, 0) not in WORKER_ROLES:
                    continue
                rss += proc.memory_info().rss / 2**20
                alive += 1
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        peak = self.peaks.setdefault(self.phase, {"processes": 0, "rss_mb": 0.0})
        peak["processes"] = max(peak["processes"], alive)
        peak["rss_mb"] = round(max(peak["rss_mb"], rss), 1)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> PhaseSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _entering(sampler: PhaseSampler, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        sampler.phase = name
        return func(*args, **kwargs)

    return wrapped


def write_input(corpus: Path, docs: int, directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("web", "en"):
        with gzip.open(corpus / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            lines = [line for _, line in zip(range(docs), handle, strict=False)]
        path = directory / f"{name}.jsonl"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(str(path))
    return paths


def run_once(inputs: list[str], out: Path, args: argparse.Namespace, merge_cpus: float) -> dict:
    from data_pipeline import global_parts, ray_job, runner
    from data_pipeline.config import PipelineConfig

    config = PipelineConfig.model_validate(
        {
            "inputs": inputs,
            "output": str(out),
            "stages": {"extract": {}, "langid": {}, "dedup": {}},
            "shard_rows": args.shard_rows,
            "ray": {"num_cpus": args.cpus},
        }
    )
    saved = ray_job.MERGE_CPUS, ray_job.build_stream, ray_job.build_merge
    saved_global = global_parts.run_global_stages
    with PhaseSampler() as sampler:
        ray_job.MERGE_CPUS = merge_cpus
        ray_job.build_stream = _entering(sampler, "stream", saved[1])
        global_parts.run_global_stages = _entering(sampler, "global", saved_global)
        ray_job.build_merge = _entering(sampler, "merge", saved[2])
        try:
            result = runner.run_pipeline(config, progress=False)
        finally:
            ray_job.MERGE_CPUS, ray_job.build_stream, ray_job.build_merge = saved
            global_parts.run_global_stages = saved_global
    run = result.manifest["throughput"]["run"]
    digest = hashlib.sha256()
    for path in sorted([*out.glob("data/*.parquet"), *out.glob("rejects/*.pq")]):
        digest.update(path.read_bytes())
    return {
        "merge_cpus": merge_cpus,
        "shards": len(list(out.glob("data/*.parquet"))),
        "peaks_by_phase": sampler.peaks,
        "phases_s": run.get("phases_s"),
        "output_sha256": digest.hexdigest(),
    }


def main(argv: list[str] | None = None) -> None:
    import tempfile

    from data_pipeline import ray_job

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--shard-rows", type=int, default=25)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--merge-cpus", type=float, nargs="+", default=[ray_job.MERGE_CPUS, 1.0])
    args = parser.parse_args(argv if argv is not None else [])
    corpus = corpus_dir(args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = write_input(corpus, args.docs, Path(tmp) / "in")
        runs: list[dict] = []
        for merge_cpus in args.merge_cpus:
            started = time.perf_counter()
            runs.append(run_once(inputs, Path(tmp) / f"out-{merge_cpus}", args, merge_cpus))
            runs[-1]["wall_s"] = round(time.perf_counter() - started, 1)
            print(runs[-1], flush=True)
    result = {
        "cpus": args.cpus,
        "documents": 2 * args.docs,
        "shard_rows": args.shard_rows,
        "runs": runs,
        "same_output": len({r["output_sha256"] for r in runs}) == 1,
    }
    for r in runs:
        print(f"merge_cpus={r['merge_cpus']}: {r['peaks_by_phase']} phases {r['phases_s']}")
    write_result("run_processes", result)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
