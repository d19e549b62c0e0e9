"""Rule signals vs datatrove: GopherRepetitionFilter + GopherQualityFilter + C4QualityFilter +
FineWebQualityFilter run by its LocalPipelineExecutor, on the same English prose documents.

Prints documents/second for both and the ratio (target >= 3x), and keep/drop agreement (target
>= 99%) with our CJK/code awareness and extra clauses off and the same (default) thresholds.

    .venv/bin/python -m benchmarks.bench_rules [--docs 5000] [--workers 1]
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import add_corpus_argument, corpus_dir, write_result

CORPUS: Path  # the --corpus directory, set by main()


def load_english(limit: int) -> list[str]:
    """English prose rows of en.jsonl.gz and web.jsonl.gz, every k-th row to span both files."""
    docs: list[str] = []
    for name in ("en.jsonl.gz", "web.jsonl.gz"):
        with gzip.open(CORPUS / name, "rt", encoding="utf-8") as f:
            docs.extend(row["text"] for row in map(json.loads, f) if row.get("lang") == "en")
    step = max(1, len(docs) // limit)
    return docs[::step][:limit]


class ShardedDocs:
    """datatrove pipeline source: the documents of this rank (picklable for forkserver)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, data: Any, rank: int = 0, world_size: int = 1):
        from datatrove.data import Document

        texts = json.loads(Path(self.path).read_text("utf-8"))
        for index in range(rank, len(texts), world_size):
            yield Document(text=texts[index], id=str(index))


class RecordKept:
    """datatrove pipeline sink: writes the ids of the documents that passed every filter."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def __call__(self, data: Any, rank: int = 0, world_size: int = 1):
        ids = [doc.id for doc in data]
        Path(self.out_dir, f"kept_{rank:03d}.txt").write_text("\n".join(ids))
        return iter(())


def run_datatrove(docs_path: str, work: str, workers: int) -> set[int]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    pipeline = [
        ShardedDocs(docs_path),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(),
        FineWebQualityFilter(),
        RecordKept(work),
    ]
    LocalPipelineExecutor(
        pipeline, tasks=workers, workers=workers, logging_dir=f"{work}/logs"
    ).run()
    kept: set[int] = set()
    for path in Path(work).glob("kept_*.txt"):
        kept.update(int(x) for x in path.read_text().split())
    return kept


def _ours_chunk(args: tuple[list[str], int]) -> list[str | None]:
    from data_pipeline.stages.rules import RulesConfig, RulesStage

    texts, batch_size = args
    config = RulesConfig(
        script_aware=False,
        code_aware=False,
        max_garbled_ratio=None,
        max_log_like_ratio=None,
    )
    stage = RulesStage(config)
    stage.setup()
    reasons: list[str | None] = []
    for start in range(0, len(texts), batch_size):
        part = texts[start : start + batch_size]
        batch = pa.table({"id": [str(i) for i in range(len(part))], "text": part})
        reasons.extend(stage(batch).column("rules_reason").to_pylist())
    return reasons


def run_ours(docs: list[str], workers: int, batch_size: int = 1000) -> list[str | None]:
    if workers == 1:
        return _ours_chunk((docs, batch_size))
    chunks = [docs[i::workers] for i in range(workers)]
    with multiprocessing.get_context("forkserver").Pool(workers) as pool:
        parts = pool.map(_ours_chunk, [(c, batch_size) for c in chunks])
    reasons: list[str | None] = [None] * len(docs)
    for rank, part in enumerate(parts):
        reasons[rank::workers] = part
    return reasons


def timed_pair(
    docs: list[str], workers: int, repeat: int
) -> tuple[float, float, set[int], list[str | None]]:
    """Best wall time of datatrove and of ours, alternating runs (load on a shared machine
    changes over minutes: alternating keeps both sides exposed to the same conditions)."""
    theirs_s = ours_s = float("inf")
    kept_theirs: set[int] = set()
    reasons: list[str | None] = []
    with tempfile.TemporaryDirectory() as work:
        docs_path = f"{work}/docs.json"
        Path(docs_path).write_text(json.dumps(docs))
        for attempt in range(repeat):
            out = Path(work, f"run{attempt}")
            out.mkdir()
            start = time.perf_counter()
            kept_theirs = run_datatrove(docs_path, str(out), workers)
            theirs_s = min(theirs_s, time.perf_counter() - start)
            start = time.perf_counter()
            reasons = run_ours(docs, workers)
            ours_s = min(ours_s, time.perf_counter() - start)
    return theirs_s, ours_s, kept_theirs, reasons


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global CORPUS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="alternate the two runs this many times; best time of each counts",
    )
    args = parser.parse_args([] if argv is None else argv)
    CORPUS = corpus_dir(args.corpus)
    docs = load_english(args.docs)
    theirs_s, ours_s, kept_theirs, reasons = timed_pair(docs, args.workers, args.repeat)
    kept_ours = {i for i, r in enumerate(reasons) if r is None}
    agree = sum((i in kept_ours) == (i in kept_theirs) for i in range(len(docs))) / len(docs)
    disagreements = Counter(
        reasons[i] or "kept" for i in range(len(docs)) if (i in kept_ours) != (i in kept_theirs)
    )
    result = {
        "documents": len(docs),
        "workers": args.workers,
        "repeat": args.repeat,
        "mean_chars": round(sum(map(len, docs)) / len(docs)),
        "datatrove_docs_per_s": round(len(docs) / theirs_s, 1),
        "ours_docs_per_s": round(len(docs) / ours_s, 1),
        "speedup": round(theirs_s / ours_s, 2),
        "keep_drop_agreement": round(agree, 4),
        "kept_datatrove": len(kept_theirs),
        "kept_ours": len(kept_ours),
        "disagreements_by_our_reason": dict(disagreements.most_common()),
        "targets": {"speedup": 3.0, "keep_drop_agreement": 0.99},
    }
    write_result(f"rules_w{args.workers}", result)
    print(
        f"rules: {result['speedup']}x datatrove ({result['ours_docs_per_s']} vs "
        f"{result['datatrove_docs_per_s']} docs/s), agreement {agree:.2%}"
    )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
