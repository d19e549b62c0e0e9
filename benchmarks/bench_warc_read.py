"""WARC reading, CPU-seconds: warcio and FastWARC alone (parse, decoded payload of every response
and resource record) against our reader (`read_unit`: warcio plus the rows), on the corpus's
web.warc.gz. Also whether the two libraries give the same records (id, offset, payload,
Content-Type). What chose warcio for data_pipeline/warc.py (RESULTS_LOG.md, 2026-12-06). Target:
read_unit's CPU at most 2x warcio's alone (the rows cost), the two libraries' records the same.

    python -m benchmarks.bench_warc_read --corpus DIR [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from data_pipeline.formats import InputFile
from data_pipeline.readers import read_unit


def _warcio(data: bytes) -> list[tuple[Any, ...]]:
    from warcio.archiveiterator import ArchiveIterator

    iterator, out = ArchiveIterator(io.BytesIO(data)), []
    for record in iterator:
        if record.rec_type in ("response", "resource"):
            payload = record.content_stream().read()
            http = record.http_headers
            kind = http.get_header("Content-Type") if http else None
            rid = record.rec_headers.get_header("WARC-Record-ID")
            out.append((rid, iterator.get_record_offset(), payload, kind))
    return out


def _fastwarc(data: bytes) -> list[tuple[Any, ...]]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    types = WarcRecordType.response | WarcRecordType.resource
    out = []
    for record in ArchiveIterator(io.BytesIO(data), record_types=types, auto_decode="all"):
        payload = record.reader.read()
        kind = record.http_headers.get("Content-Type") if record.is_http else None
        out.append((record.record_id, record.stream_pos, payload, kind))
    return out


def _ours(path: str) -> int:
    source = InputFile(path, "warc", "bench")
    tables = read_unit((source,), "bench", shard_rows=5000, batch_rows=256, eval_fraction=0.0)
    return sum(t.num_rows for t in tables if t is not None)


def _best(run: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = str(corpus_dir(args.corpus) / "web.warc.gz")
    with open(path, "rb") as handle:
        data = handle.read()
    warcio_s, by_warcio = _best(lambda: _warcio(data), args.repeat)
    fastwarc_s, by_fastwarc = _best(lambda: _fastwarc(data), args.repeat)
    ours_s, rows = _best(lambda: _ours(path), args.repeat)
    result = {
        "records": len(by_warcio),
        "cpu_s": {"warcio": warcio_s, "fastwarc": fastwarc_s, "read_unit": ours_s},
        "same_records": by_warcio == by_fastwarc,
        "read_file_rows": rows,
        "target_met": ours_s <= 2 * warcio_s and by_warcio == by_fastwarc,
    }
    write_result("warc_read", result)


if __name__ == "__main__":
    main()
