"""WARC (and ARC) records as raw rows: HTTP responses and resource records, via warcio.

A damaged record is a reject row, never a crash or a silent loss (`read_warc`'s docstring). A
WARC.gz is read member by member (`data_pipeline.gzmembers`), so a corrupt member loses only
itself.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pyarrow as pa

from data_pipeline.batcher import Batcher

_CHUNK = 1 << 20


def _drain(stream: Any) -> int:
    """Read and drop the rest of a record: its size."""
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
    return size


def read_warc(
    stream: Any, out: Batcher, fields: Any, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """HTTP response (and resource) records; a truncated record ends the file with a reject row.
    A payload over `max_bytes` is a `too_large` row, skipped without being held. In a WARC.gz a
    corrupt gzip member is one `corrupt_gzip` row and reading goes on at the next member; a file
    cut inside a member is a `truncated_record` row (the records before the damage are kept). A
    record without a WARC-Type (its headers cut or damaged) is a `malformed_record` row."""
    while True:
        truncated = yield from _warc_records(stream, out, max_bytes)
        damage = getattr(stream, "damage", None)
        if damage is None:
            break
        offset = stream.damage_offset
        if damage == "corrupt_gzip":
            out.add(f"{out.source.name}@gz{offset}", reason="corrupt_gzip")
        elif not truncated:  # the cut record was not seen by warcio: count it here
            out.add(f"{out.source.name}@gz{offset}+", reason="truncated_record")
        if not stream.resume():
            break
    if (table := out.flush()) is not None:
        yield table


def _warc_records(
    stream: Any, out: Batcher, max_bytes: int | None
) -> Generator[pa.Table, None, bool]:
    """Rows of the records warcio finds in `stream` until its end: True when the last one is a
    `truncated_record` row."""
    from warcio.archiveiterator import ArchiveIterator

    offset, truncated = 0, False
    try:
        iterator = ArchiveIterator(stream, no_record_parse=False, arc2warc=True)
        _without_invented_ids(iterator)
        for record in iterator:
            if record.rec_type is None:  # no WARC-Type: headers cut short or damaged
                offset, truncated = iterator.get_record_offset(), False
                out.add(f"{out.source.name}@{offset}", reason="malformed_record")
                continue
            if record.rec_type not in ("response", "resource"):
                continue
            offset, truncated = _warc_row(record, iterator, out, max_bytes)
            if out.full():
                yield out.flush()
    except Exception as exc:  # warcio raises anything (AttributeError, ...) on damaged records
        out.add(
            f"{out.source.name}@{offset}+",
            reason="truncated_record",
            meta={"error": str(exc)[:200]},
        )
        truncated = True
    return truncated


def _without_invented_ids(iterator: Any) -> None:
    """Make `iterator` drop the WARC-Record-ID warcio invents (a random uuid4, new on every read)
    for each record it parses as ARC (an ARC file, or a WARC record whose header line is damaged),
    so such a record is named by its offset, the same on every run."""
    parser = iterator.loader.arc_parser
    parse = parser.parse

    def parse_keeping_ids_stable(stream: Any, headerline: Any = None) -> Any:
        headers = parse(stream, headerline)
        headers.remove_header("WARC-Record-ID")
        return headers

    parser.parse = parse_keeping_ids_stable


def _warc_row(record: Any, iterator: Any, out: Batcher, max_bytes: int | None) -> tuple[int, bool]:
    content = record.content_stream()
    # Before the offset. warcio's read(-1) reads nothing: no limit is read() with no argument.
    payload = content.read(max_bytes + 1) if max_bytes is not None else content.read()
    oversize = max_bytes is not None and len(payload) > max_bytes
    size = len(payload) + (_drain(content) if oversize else 0)
    # The file ended before the record's Content-Length (what is left of the record once its
    # payload is read, e.g. a chunked body's trailer, is read past): part of a page is no document.
    raw = record.raw_stream
    if hasattr(raw, "limit"):
        _drain(raw)
    truncated = getattr(raw, "limit", 0) > 0
    offset = iterator.get_record_offset()
    headers = record.rec_headers
    doc_id = headers.get_header("WARC-Record-ID") or f"{out.source.name}@{offset}"
    url = headers.get_header("WARC-Target-URI")
    meta: dict[str, Any] = {"warc_date": headers.get_header("WARC-Date")}
    content_type = None
    if record.http_headers is not None:
        content_type = record.http_headers.get_header("Content-Type")
        meta["http_status"] = record.http_headers.get_statuscode()
    elif record.rec_type == "resource":
        content_type = headers.get_header("Content-Type")
    meta["content_type"] = content_type
    out.add(
        doc_id.strip("<>"),
        url=url,
        meta=meta,
        payload=None if oversize or truncated else payload,
        content_type=content_type or "",
        reason="truncated_record" if truncated else "too_large" if oversize else None,
        raw_bytes=size,
    )
    return offset, truncated
