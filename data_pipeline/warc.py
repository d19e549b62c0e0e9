"""WARC (and ARC) records as raw rows: HTTP responses and resource records, via warcio.

A damaged record is a reject row, never a crash or a silent loss (`read_warc`'s docstring). A
WARC.gz is read member by member (`data_pipeline.gzmembers`), so a corrupt member loses only
itself.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow as pa

from data_pipeline.batcher import Batcher
from data_pipeline.warcframe import Frame, Framer

_CHUNK = 1 << 20


def _drain(stream: Any) -> int:
    """Read and drop the rest of a record: its size."""
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
    return size


WARC_RECORD_FACTOR = 2
"""A WARC record (headers and block) may take this many times `max_input_bytes` before it is a
`record_too_large` reject, read past without being held (64 MiB with no `max_input_bytes`)."""
_NO_LIMIT_RECORD = 64 << 20
_ARC_LINE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*:[^\s]* [^\r\n]* [0-9]+\r?\n")
"""An ARC header line (`URL IP DATE MIME LENGTH`, or ARC v1's `filedesc://...`): anything else
is read as WARC, so bytes before the first WARC record are a reject, not a lost file."""
_FIELD = re.compile(
    rb"(?im)^(warc-record-id|warc-target-uri|warc-date):[ \t]*([^\r\n]*?)[ \t]*\r?$"
)


def record_limit(max_bytes: int | None) -> int:
    """The most bytes one WARC record may have (`WARC_RECORD_FACTOR`)."""
    return _NO_LIMIT_RECORD if max_bytes is None else WARC_RECORD_FACTOR * max_bytes


def read_warc(
    stream: Any, out: Batcher, fields: Any, max_bytes: int | None = None
) -> Iterator[pa.Table]:
    """HTTP response (and resource) records as rows. A payload over `max_bytes` is a `too_large`
    row, a record over `record_limit(max_bytes)` a `record_too_large` row, both read past without
    being held. A record whose Content-Length is not where its block ends is a
    `bad_content_length` row and reading goes on at the next record (`data_pipeline.warcframe`).
    In a WARC.gz a corrupt gzip member is one `corrupt_gzip` row and reading goes on at the next
    member; a file cut inside a record is a `truncated_record` row (the records before the damage
    are kept). A record without a WARC-Type, or with a value none of WARC's (damaged), is a
    `malformed_record` row. An ARC file is read by
    warcio alone."""
    framer = Framer(stream, record_limit(max_bytes))
    while True:
        first = framer.peek(1 << 12).lstrip(b"\r\n")
        if _ARC_LINE.match(first):  # an ARC file: its first line is a URL and fields
            yield from _read_arc(framer, out, max_bytes)
            return
        cut = yield from _framed_records(framer, out, max_bytes)
        damage = getattr(stream, "damage", None)
        if damage is None:
            break
        if cut is not None and cut.offset < getattr(stream, "member_position", cut.offset):
            # The cut record began in an earlier, whole member: a reject of its own.
            _reject(cut, out, cut.kind, _offset(framer, cut.offset))
            cut = None
        if damage == "corrupt_gzip" or cut is None:
            offset = stream.damage_offset
            suffix = "" if damage == "corrupt_gzip" else "+"
            out.add(f"{out.source.name}@gz{offset}{suffix}", reason=_DAMAGE[damage])
        else:
            _reject(cut, out, "truncated_record", _offset(framer, cut.offset))
        if not stream.resume():
            break
        framer.restart()
    if (table := out.flush()) is not None:
        yield table


_DAMAGE = {"corrupt_gzip": "corrupt_gzip", "truncated": "truncated_record"}


def _offset(framer: Framer, position: int) -> int:
    """The record's offset in the file: in a WARC.gz, that of the gzip member it starts in."""
    offset_of = getattr(framer.stream, "offset_of", None)
    return position if offset_of is None else int(offset_of(position))


def _framed_records(
    framer: Framer, out: Batcher, max_bytes: int | None
) -> Generator[pa.Table, None, Frame | None]:
    """Rows of the framed records until the stream ends: the last frame when the stream ended
    inside it (a cut record, which gzip damage reports itself), else None."""
    damaged = getattr(framer.stream, "damage", None) is not None
    while (frame := framer.next()) is not None:
        damaged = getattr(framer.stream, "damage", None) is not None
        if damaged and framer.eof and not framer.buf and frame.kind != "record":
            return frame
        offset = _offset(framer, frame.offset)
        if frame.kind == "record":
            _framed_row(frame, offset, out, max_bytes)
        else:
            _reject(frame, out, frame.kind, offset)
        if out.full():
            yield out.flush()
    return None


WARC_TYPES = frozenset(
    ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion")
    + ("continuation",)
)
"""The WARC-Type values of WARC 1.0 and 1.1 (and what warcio makes of ARC records): a record of
any other type (a damaged or missing value) is a `malformed_record` reject, so it is counted;
one of these that holds no document (a request, metadata, ...) is read past without a row."""


def _type_error(rec_type: str | None) -> dict[str, str]:
    return {"error": f"WARC-Type {rec_type!r} is none of WARC's"[:200]}


def _reject(
    frame: Frame, out: Batcher, reason: str, offset: int, meta: dict[str, Any] | None = None
) -> None:
    found = {m.group(1).lower(): m.group(2) for m in _FIELD.finditer(frame.head)}
    record_id = found.get(b"warc-record-id", b"").decode("utf-8", "replace").strip("<>")
    url = found.get(b"warc-target-uri")
    date = found.get(b"warc-date")
    out.add(
        record_id or f"{out.source.name}@{offset}",
        url=url.decode("utf-8", "replace") if url else None,
        meta={"warc_date": date.decode("utf-8", "replace") if date else None, **(meta or {})},
        reason=reason,
        raw_bytes=frame.size - len(frame.head),
    )


def _framed_row(frame: Frame, offset: int, out: Batcher, max_bytes: int | None) -> None:
    """The row of one whole record, parsed by warcio."""
    from warcio.archiveiterator import ArchiveIterator

    try:
        iterator = ArchiveIterator(
            io.BytesIO(frame.data + b"\r\n\r\n"), no_record_parse=False, arc2warc=True
        )
        _without_invented_ids(iterator)
        record = next(iter(iterator))
        if record.rec_type not in WARC_TYPES:
            _reject(frame, out, "malformed_record", offset, _type_error(record.rec_type))
        elif record.rec_type in ("response", "resource"):
            _warc_row(record, lambda: offset, out, max_bytes)
    except Exception as exc:  # warcio raises anything (AttributeError, ...) on damaged records
        out.add(
            f"{out.source.name}@{offset}",
            reason="malformed_record",
            meta={"error": str(exc)[:200]},
        )


class _Rest(io.RawIOBase):
    """What a framer has buffered, then the rest of its stream."""

    def __init__(self, framer: Framer) -> None:
        self.framer = framer

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        held = self.framer.buf
        if held:
            data = bytes(held[: len(buffer)])
            del held[: len(data)]
        else:
            data = self.framer.stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    @property
    def damage(self) -> str | None:
        return getattr(self.framer.stream, "damage", None)

    @property
    def damage_offset(self) -> int:
        return int(self.framer.stream.damage_offset)

    def resume(self) -> bool:
        return bool(self.framer.stream.resume())


def _read_arc(framer: Framer, out: Batcher, max_bytes: int | None) -> Iterator[pa.Table]:
    """An ARC file (or one that is no WARC), read by warcio as before the framer; offsets are
    the file's (a gzip member's), also after a resumed member."""
    stream, base = _Rest(framer), framer.pos
    offset_of = getattr(framer.stream, "offset_of", None)
    while True:

        def in_file(offset: int, base: int = base) -> int:
            return base + offset if offset_of is None else int(offset_of(base + offset))

        truncated = yield from _warc_records(stream, out, max_bytes, in_file)
        damage = stream.damage
        if damage is None:
            break
        offset = stream.damage_offset
        if damage == "corrupt_gzip":
            out.add(f"{out.source.name}@gz{offset}", reason="corrupt_gzip")
        elif not truncated:  # the cut record was not seen by warcio: count it here
            out.add(f"{out.source.name}@gz{offset}+", reason="truncated_record")
        if not stream.resume():
            break
        base = framer.stream.decoded
    if (table := out.flush()) is not None:
        yield table


def _warc_records(
    stream: Any, out: Batcher, max_bytes: int | None, in_file: Callable[[int], int]
) -> Generator[pa.Table, None, bool]:
    """Rows of the records warcio finds in `stream` until its end: True when the last one is a
    `truncated_record` row."""
    from warcio.archiveiterator import ArchiveIterator

    offset, truncated = 0, False
    try:
        iterator = ArchiveIterator(stream, no_record_parse=False, arc2warc=True)
        _without_invented_ids(iterator)
        for record in iterator:
            if record.rec_type not in WARC_TYPES:  # headers cut short or damaged
                offset, truncated = in_file(iterator.get_record_offset()), False
                out.add(
                    f"{out.source.name}@{offset}",
                    reason="malformed_record",
                    meta=_type_error(record.rec_type),
                )
                continue
            if record.rec_type not in ("response", "resource"):
                continue

            def record_offset() -> int:
                return in_file(iterator.get_record_offset())

            truncated = _warc_row(record, record_offset, out, max_bytes)
            offset = record_offset()
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


def _warc_row(
    record: Any, offset_of: Callable[[], int], out: Batcher, max_bytes: int | None
) -> bool:
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
    offset = offset_of()  # warcio's: only once the payload is read
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
    return truncated
