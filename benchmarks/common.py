"""Shared helpers for benchmark scripts: timing, peak RSS, and writing the JSON result.

Each script in benchmarks/ compares the project against a named baseline on the same input in the
same run, prints the ratio and writes `benchmarks/results/<name>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CORPUS_ENV = "PRETRAIN_CORPUS"


def add_corpus_argument(parser: argparse.ArgumentParser) -> None:
    """`--corpus DIR`: the development corpus these benchmarks read (BENCHMARKS.md, "Input")."""
    parser.add_argument(
        "--corpus",
        type=Path,
        default=os.environ.get(CORPUS_ENV),
        help="directory with web.warc.gz, html.tar.gz and {en,zh,code,math,web}.jsonl.gz "
        f"(default: ${CORPUS_ENV}); see BENCHMARKS.md for what it holds",
    )


def corpus_dir(value: str | Path | None) -> Path:
    """The corpus directory given, or exit with what to pass."""
    if value is None:
        raise SystemExit(
            f"this benchmark reads the development corpus: pass --corpus DIR or set {CORPUS_ENV} "
            "(BENCHMARKS.md, 'Input', says which files it needs)"
        )
    path = Path(value)
    if not path.is_dir():
        raise SystemExit(f"--corpus {path}: not a directory")
    return path


def timed(func: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best wall time of `repeat` runs and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "unix_time": round(time.time()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        **result,
    }
    path = RESULTS / f"{name}.json"
    if not os.environ.get("BENCH_SMOKE"):  # a smoke run (benchmarks.run --smoke) keeps the results
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    print(json.dumps(payload, sort_keys=True), flush=True)  # one line: the harness reads it
    return path
