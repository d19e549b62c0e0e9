"""CPU-seconds of the dedup map side: mapped in the stream per piece vs per part afterwards.

One part of `--docs` real documents (CORPUS/web.jsonl.gz, the first ones), cut into pieces of
`--piece-rows` rows as the stage actors write them. Measured in this process (CPU-seconds, not
wall: the machine is shared):

    stream_pieces_cpu_s   what the actors add to the stream: write the pieces AND their map
                          side (data_pipeline.piece_maps), minus writing the pieces alone
    map_task_combine_cpu_s  the part's map task when the pieces were mapped (combine + persist)
    map_task_whole_cpu_s    the baseline: the part's map task when they were not (map + persist)

The separate map phase runs after the stream, once every part is tagged (its slowest part ends
it); the stream's actors scale with the workers. `--repeat` runs each side that many times and
keeps the smallest.

    .venv/bin/python -m benchmarks.bench_piece_maps --corpus DIR [--docs 625] [--piece-rows 256]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from data_pipeline import global_parts, workers
from data_pipeline.stages.dedup import DedupStage

SHARD = "web-00000"


def part_table(corpus: Path, docs: int) -> pa.Table:
    texts = []
    with gzip.open(corpus / "web.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            texts.append(json.loads(line)["text"])
            if len(texts) >= docs:
                break
    return pa.table(
        {
            "id": [f"web/{i}" for i in range(len(texts))],
            "text": texts,
            "_shard": [SHARD] * len(texts),
            "_row": list(range(len(texts))),
            "_raw_bytes": [len(t.encode()) for t in texts],
        }
    )


def _cpu(work: Any) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def once(table: pa.Table, rows: int, stage: DedupStage) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_piece_maps_") as tmp:
        mapped, plain = f"{tmp}/mapped", f"{tmp}/plain"

        def write(out: str, with_map: DedupStage | None) -> None:
            for lo in range(0, table.num_rows, rows):
                workers.write_mapped_pieces(table.slice(lo, rows), out, with_map)

        with_map, without = _cpu(lambda: write(mapped, stage)), _cpu(lambda: write(plain, None))
        spec, n = stage.spec(), table.num_rows
        combine = _cpu(lambda: global_parts.map_task(mapped, SHARD, n, spec))
        whole = _cpu(lambda: global_parts.map_task(plain, SHARD, n, spec))
        return {
            "stream_pieces_cpu_s": with_map - without,
            "map_task_combine_cpu_s": combine,
            "map_task_whole_cpu_s": whole,
        }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=625)
    parser.add_argument("--piece-rows", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv if argv is not None else [])
    table = part_table(corpus_dir(args.corpus), args.docs)
    stage = DedupStage()
    stage.setup()
    once(table, args.piece_rows, stage)  # warm: imports, first allocations
    runs = [once(table, args.piece_rows, stage) for _ in range(args.repeat)]
    best = {key: round(min(r[key] for r in runs), 3) for key in runs[0]}
    result = {
        "input": {
            "docs": table.num_rows,
            "text_mb": round(sum(table["_raw_bytes"].to_pylist()) / 1e6, 2),
        },
        "piece_rows": args.piece_rows,
        "cpu_s": best,
        "map_phase_cpu_ratio_new_over_old": round(
            best["map_task_combine_cpu_s"] / best["map_task_whole_cpu_s"], 3
        ),
        "machine": {"shared": True},
    }
    write_result("bench_piece_maps", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
