"""Whole pipeline vs datatrove on the same WARC, same worker count (issue 3).

    ours:      pretrain data run  (Ray Data: read -> extract -> langid -> rules -> Parquet shards)
    baseline:  datatrove WarcReader -> Trafilatura -> GopherRepetition + GopherQuality + C4Quality
               + FineWebQuality filters -> ParquetWriter, LocalPipelineExecutor

Input: CORPUS/web.warc.gz (`--corpus DIR`: 967 HTML pages + 1 binary record) split by record into 4
WARC.gz files, so datatrove's tasks can parallelise too (it reads one file per task). Each run is
its own process (fresh Ray / fresh executor; start-up included). Reports docs/s at 1 and 2
workers, scaling efficiency, per-stage time (in-process, one core), and driver / worker peak RSS
at 1x and 4x input. Both use Trafilatura; `ours_resiliparse` shows the faster extractor.

    .venv/bin/python -m benchmarks.bench_pipeline [--workers 1 2] [--skip-memory]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, write_result

CORPUS: Path  # --corpus DIR / web.warc.gz, set by main()
PARTS = 4
EXTRACT_TIMEOUT_S = 1.0
"""Per-document extraction limit of both sides (datatrove's extractor default is 1 s)."""


def split_warc(source: Path, target: Path, copies: int = 1, limit: int | None = None) -> int:
    """Write `copies` x PARTS WARC.gz files holding the (first `limit`) HTTP responses of
    `source`; returns the number of records written."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    target.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as handle:
        records = [_serialise(r) for r in ArchiveIterator(handle) if r.rec_type == "response"]
    records = records[:limit]
    for copy in range(copies):
        for part in range(PARTS):
            buffer = io.BytesIO()
            writer = WARCWriter(buffer, gzip=True)
            for raw in records[part::PARTS]:
                for record in ArchiveIterator(io.BytesIO(raw)):
                    writer.write_record(record)
            (target / f"web{copy}_{part}.warc.gz").write_bytes(buffer.getvalue())
    return len(records) * copies


def _serialise(record: Any) -> bytes:
    from warcio.warcwriter import WARCWriter

    buffer = io.BytesIO()
    WARCWriter(buffer, gzip=False).write_record(record)
    return buffer.getvalue()


class PeakRss:
    """Polls this process (the driver) and its descendants (workers) for peak RSS, in MB."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.driver = self.worker = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.driver = max(self.driver, self.me.memory_info().rss / 2**20)
                for child in self.me.children(recursive=True):
                    name = " ".join(child.cmdline()[:1])
                    if "ray::" in name or "python" in name:
                        self.worker = max(self.worker, child.memory_info().rss / 2**20)
            except Exception:  # a process ended between listing and reading it
                continue

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def child_ours(inputs: str, out: str, workers: int, extractor: str) -> dict[str, Any]:
    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline

    config = PipelineConfig.model_validate(
        {
            "inputs": [inputs],
            "output": out,
            "shard_rows": 5000,
            "batch_rows": 64,
            "stages": {
                "extract": {"extractor": extractor, "timeout_s": EXTRACT_TIMEOUT_S},
                "langid": {},
                "rules": {},
            },
            "ray": {"num_cpus": workers, "workers": workers, "block_mb": 2},
        }
    )
    with PeakRss() as rss:
        start = time.perf_counter()
        result = run_pipeline(config, progress=False)
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "docs_in": result.ledger["documents_in"],
        "docs_kept": result.ledger["documents_kept"],
        "driver_peak_mb": round(rss.driver),
        "worker_peak_mb": round(rss.worker),
    }


def child_datatrove(inputs: str, out: str, workers: int) -> dict[str, Any]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import ParquetWriter

    pipeline = [
        WarcReader(inputs, glob_pattern="*.warc.gz"),
        Trafilatura(favour_precision=True, timeout=EXTRACT_TIMEOUT_S),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(),
        FineWebQualityFilter(),
        ParquetWriter(f"{out}/shards"),
    ]
    files = len(list(Path(inputs).glob("*.warc.gz")))
    with PeakRss() as rss:
        start = time.perf_counter()
        LocalPipelineExecutor(
            pipeline, tasks=files, workers=workers, logging_dir=f"{out}/logs"
        ).run()
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "driver_peak_mb": round(rss.driver),
        "worker_peak_mb": round(rss.worker),
    }


def _child(kind: str, *args: Any) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; it prints one JSON line last."""
    env = {**os.environ, "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bench_pipeline",
        "--child",
        kind,
        *[str(a) for a in args],
    ]
    run = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        cwd=Path(__file__).resolve().parents[1],
    )
    if run.returncode != 0:
        raise RuntimeError(f"{kind} failed: {run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def stage_seconds(inputs: Path) -> dict[str, float]:
    """Where the time goes: each stage in-process over one input file, one core."""
    import pyarrow as pa

    from data_pipeline.formats import InputFile
    from data_pipeline.readers import read_unit
    from data_pipeline.stages.registry import stage_class

    path = sorted(inputs.glob("*.warc.gz"))[0]
    timings: dict[str, float] = {}
    start = time.perf_counter()
    table = pa.concat_tables(
        read_unit(
            (InputFile(str(path), "warc", path.stem),),
            path.stem,
            shard_rows=10**6,
            batch_rows=64,
            eval_fraction=0.005,
        )
    )
    timings["read"] = time.perf_counter() - start
    for name, config in (("extract", {"extractor": "trafilatura"}), ("langid", {}), ("rules", {})):
        cls = stage_class(name)
        stage = cls(cls.Config.model_validate(config))
        stage.setup()
        start = time.perf_counter()
        table = stage(table)
        timings[name] = time.perf_counter() - start
    return {k: round(v, 3) for k, v in timings.items()} | {"docs": table.num_rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global CORPUS
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--limit",
        type=int,
        default=400,
        help="WARC records used (all 968: --limit 0); 4x input = 4 copies",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    if args.child:
        kind, *rest = args.child
        result = (
            child_ours(rest[0], rest[1], int(rest[2]), rest[3])
            if kind == "ours"
            else child_datatrove(rest[0], rest[1], int(rest[2]))
        )
        print(json.dumps(result))
        return result
    CORPUS = corpus_dir(args.corpus) / "web.warc.gz"
    return _compare(args.workers, args.skip_memory, args.limit or None)


def _compare(worker_counts: list[int], skip_memory: bool, limit: int | None) -> dict[str, Any]:
    result: dict[str, Any] = {"input": str(CORPUS), "files": PARTS, "runs": {}, "limit": limit}
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        one_x = Path(tmp) / "1x"
        docs = split_warc(CORPUS, one_x, limit=limit)
        result["documents"] = docs
        result["stage_seconds"] = stage_seconds(one_x)
        for workers in worker_counts:
            ours = _child("ours", one_x, f"{tmp}/ours{workers}", workers, "trafilatura")
            theirs = _child("datatrove", one_x, f"{tmp}/dt{workers}", workers)
            fast = _child("ours", one_x, f"{tmp}/fast{workers}", workers, "resiliparse")
            result["runs"][workers] = {
                "ours": ours,
                "datatrove": theirs,
                "ours_resiliparse": fast,
                "ours_docs_per_s": round(docs / ours["seconds"], 1),
                "datatrove_docs_per_s": round(docs / theirs["seconds"], 1),
                "speedup": round(theirs["seconds"] / ours["seconds"], 2),
                "speedup_resiliparse": round(theirs["seconds"] / fast["seconds"], 2),
            }
            print(
                f"workers={workers}: ours {ours['seconds']:.1f}s, datatrove "
                f"{theirs['seconds']:.1f}s, ratio {result['runs'][workers]['speedup']}x "
                f"(resiliparse {result['runs'][workers]['speedup_resiliparse']}x)",
                flush=True,
            )
        if len(worker_counts) >= 2:
            low, high = worker_counts[0], worker_counts[-1]
            for who in ("ours", "datatrove"):
                speed = result["runs"][low][who]["seconds"] / result["runs"][high][who]["seconds"]
                result[f"{who}_scaling_efficiency"] = round(speed / (high / low), 2)
        if not skip_memory:
            four_x = Path(tmp) / "4x"
            split_warc(CORPUS, four_x, copies=4, limit=limit)
            big = _child("ours", four_x, f"{tmp}/ours4x", worker_counts[-1], "resiliparse")
            small = result["runs"][worker_counts[-1]]["ours_resiliparse"]
            result["memory_mb"] = {
                "1x": {k: small[k] for k in ("driver_peak_mb", "worker_peak_mb")},
                "4x": {k: big[k] for k in ("driver_peak_mb", "worker_peak_mb")},
            }
    result["target_speedup"] = 1.5
    result["met"] = all(r["speedup"] >= 1.5 for r in result["runs"].values())
    write_result("bench_pipeline", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
