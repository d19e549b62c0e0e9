"""WARC (and ARC) records as raw rows, read by warcio: an HTTP response or resource record is one
row, any other WARC type is read past, and damage is a reject row with its byte range in
`meta.bytes`, never a crash (what each damage costs: docs/data.md, "Rejects and the ledger")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from warcio.archiveiterator import ArchiveIterator, UnseekableYetTellable

from data_pipeline.batcher import Batcher
from data_pipeline.formats import drain

WARC_RECORD_FACTOR = 2
"""A WARC record's block may take this many times `max_input_bytes` before it is a
`record_too_large` reject, read past by its Content-Length without being held (64 MiB with no
`max_input_bytes`)."""
_NO_LIMIT_RECORD = 64 << 20
HEADER_LIMIT = 1 << 20
"""Bytes of lines warcio may read between two reads of a block (a record's WARC and HTTP
headers, the blank lines after it): more is damage or a bomb, and the rest of the file one
reject, so headers are never held past this."""
WARC_TYPES = frozenset(
    ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion")
    + ("continuation",)
)
"""The WARC-Type values of WARC 1.0 and 1.1 (and what warcio makes of ARC records): a record of
any other type (damaged, or cut inside its headers) is a `malformed_record` reject."""


def record_limit(max_bytes: int | None) -> int:
    """The most bytes one WARC record's block may have (`WARC_RECORD_FACTOR`)."""
    return _NO_LIMIT_RECORD if max_bytes is None else WARC_RECORD_FACTOR * max_bytes


def read_warc(
    stream: Any, out: Batcher, fields: Any, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """Rows of the records of `stream` (the file's bytes; warcio undoes gzip). A payload over
    `max_bytes` is a `too_large` row, a block over `record_limit(max_bytes)` a `record_too_large`
    row, both read past without being held."""
    raw = UnseekableYetTellable(stream)  # counts the file's bytes: where damage is
    iterator = ArchiveIterator(raw, arc2warc=True)
    if not out.source.name.lower().endswith(".arc.gz"):  # junk in a WARC file is no ARC record
        iterator.known_format, iterator.mixed_arc_warc = "warc", False
    iterator.INC_RECORD = ""  # warcio's warning for a wrong length: the reject row says it
    _without_invented_ids(iterator)
    _bound_lines(iterator.reader)
    whole: list[bool] = []  # a .warc.gz compressed as one gzip stream, not member by member
    iterator._raise_invalid_gzip_err = lambda: whole.append(True)  # read it all the same
    error = None
    try:
        for record in iterator:
            if record.rec_type in ("response", "resource") or not _valid(record):
                _row(iterator, record, out, max_bytes, not whole)
            if out.full():
                yield out.flush()
    except Exception as exc:  # warcio raises anything (AttributeError, ...) on damaged bytes
        error = f"{type(exc).__name__}: {exc}"[:200]
    start = iterator.offset  # where the last record read whole ends
    drain(raw)
    if raw.tell() > start:  # bytes warcio could not read as records: the rest of the file
        meta = {"bytes": f"{start}-{raw.tell()}" if not whole else None}
        meta["error"] = error or "not a record"
        out.add(f"{out.source.name}@{start}+", reason="truncated_input", meta=meta)
    if (table := out.flush()) is not None:
        yield table


def _valid(record: Any) -> bool:
    """Whether warcio read `record`'s headers whole: a WARC-Type of WARC's, a Content-Length."""
    return record.rec_type in WARC_TYPES and record.length is not None


def _row(iterator: Any, record: Any, out: Batcher, max_bytes: int | None, placed: bool) -> None:
    """The row of one response, resource or damaged record (`placed`: warcio's offsets are the
    file's; not in a .warc.gz compressed whole, where a reject row gives no byte range)."""
    headers = record.rec_headers
    raw = record.raw_stream
    declared = record.length or 0
    payload = b""
    if not _valid(record):  # no Content-Length: cut in its headers (its block runs to the end)
        reason: str | None = "malformed_record" if declared else "truncated_record"
    elif declared > record_limit(max_bytes):
        reason = "record_too_large"
    else:
        content = record.content_stream()
        # warcio's read(-1) reads nothing: no limit is read() with no argument
        payload = content.read(max_bytes + 1) if max_bytes is not None else content.read()
        oversize = max_bytes is not None and len(payload) > max_bytes
        reason = "too_large" if oversize else None
        size = len(payload) + (drain(content) if oversize else 0)
    drain(raw)  # what is left of the block (a chunked body's trailer)
    if not _valid(record) or reason == "record_too_large":  # its block, as far as it goes
        size = declared - getattr(raw, "limit", 0)
    # the file ended before the block did: part of a page is no document
    truncated = getattr(raw, "limit", 0) > 0
    errors = iterator.err_count
    offset = iterator.get_record_offset()  # reads to the next record: a wrong length shows
    if truncated:
        reason = "truncated_record"
    elif iterator.err_count > errors:
        reason = "bad_content_length"
    meta: dict[str, Any] = {"warc_date": headers.get_header("WARC-Date")}
    content_type = None
    if record.http_headers is not None:
        content_type = record.http_headers.get_header("Content-Type")
        meta["http_status"] = record.http_headers.get_statuscode()
    elif record.rec_type == "resource":
        content_type = headers.get_header("Content-Type")
    meta["content_type"] = content_type
    if placed and reason is not None and reason not in ("too_large", "record_too_large"):
        meta["bytes"] = f"{offset}-{iterator.offset}"  # to where the next record starts
    if not _valid(record):
        error = f"WARC-Type {record.rec_type!r}, Content-Length {record.length!r}"
        meta["error"] = error[:200]
    doc_id = headers.get_header("WARC-Record-ID") or f"{out.source.name}@{offset}"
    out.add(
        doc_id.strip("<>"),
        url=headers.get_header("WARC-Target-URI"),
        meta=meta,
        payload=payload if reason is None else None,
        content_type=content_type or "",
        reason=reason,
        raw_bytes=size,
    )


def _bound_lines(reader: Any) -> None:
    """Make warcio's `reader` raise once its lines since the last read of a block pass
    `HEADER_LIMIT` bytes (warcio reads a header line whole, however long)."""
    readline, read = reader.readline, reader.read
    held = [0]

    def bounded_readline(length: int | None = None) -> bytes:
        left = HEADER_LIMIT - held[0]
        line = readline(left if length is None else min(length, left))
        held[0] += len(line)
        if held[0] >= HEADER_LIMIT:
            raise ValueError(f"over {HEADER_LIMIT} bytes of header lines")
        return bytes(line)

    def block_read(length: int | None = None) -> bytes:
        held[0] = 0
        return bytes(read(length))

    reader.readline, reader.read = bounded_readline, block_read


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
