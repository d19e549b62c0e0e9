"""WARC records cut out of a byte stream by their Content-Length, checked against what follows.

warcio trusts a record's Content-Length: one too large swallows the records after it (they come
out as one truncated record, lost), one too small leaves the rest of the block where the next
record's headers should be (warcio gives up on the file). `Framer` checks that the declared block
is followed by a blank line and the next `WARC/1.` header line (or the end of the file); when it
is not, the record is a `bad_content_length` frame and the framer goes on at the next record start
after that record's headers. A record start is a `WARC/1.0` or `WARC/1.1` line (or warcio's
`WARC/0.17`, `WARC/0.18`) that follows a blank line, or that is followed by a header field line
(`Name:`) wherever it begins: a record cut short and the next one written right after it (a
crawler restarted on the same file) have no blank line between them. In a WARC.gz the start of a
gzip member is one too (the stream's `member_starts`): one member per record is how WARC.gz files
are written. The framer only looks for record starts after damage, so a `WARC/1.0` line inside a
payload is never a record start when the lengths are right.

A record whose headers and block are over `limit` bytes is never held: it is read past (still
checked, so a wrong length over the limit resyncs too) and is a `record_too_large` frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from data_pipeline.warcblock import (
    CONTENT_LENGTH,
    HEADER_END,
    HEADER_LIMIT,
    digest_verdict,
    message_end,
)

_CHUNK = 1 << 16
_VERSION_LINE = re.compile(rb"WARC/(?:1\.[01]|0\.1[78])\r?\n")
"""A record's first line: where the framer may resync after a bad record (`_is_record_start`)."""
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}[ \t]*:")
"""A header field line's start (RFC 9110 token, then a colon)."""
_FIELD_LOOK = 70  # bytes after a version line enough to see a field name and its colon
_NEXT_KEEP = 16  # bytes kept between scanned chunks, so a boundary split across two is found
_TAIL = 16  # bytes after a block enough to see the blank line and `WARC/`


@dataclass(frozen=True)
class Frame:
    """One record's bytes (`kind` "record"), or a reject: "bad_content_length",
    "record_too_large", "truncated_record" (the stream ends inside it) or "malformed_record"
    (no header block or no Content-Length). `offset` is its first byte's position in the stream;
    `size` its bytes; `head` its WARC headers when they were read (`data` holds them too)."""

    kind: str
    offset: int
    size: int
    data: bytes = b""
    head: bytes = b""


class Framer:
    """Frames of the WARC records in `stream` (a readable byte stream), in order."""

    def __init__(self, stream: Any, limit: int) -> None:
        self.stream, self.limit = stream, limit
        self.buf = bytearray()
        self.pos = 0  # stream position of buf[0]
        self.eof = False

    def _fill(self, size: int) -> bool:
        """Read until `size` bytes are buffered: False when the stream ended first."""
        while len(self.buf) < size and not self.eof:
            chunk = self.stream.read(max(_CHUNK, size - len(self.buf)))
            if chunk:
                self.buf += chunk
            else:
                self.eof = True
        return len(self.buf) >= size

    def _consume(self, count: int) -> None:
        del self.buf[:count]
        self.pos += count

    def restart(self) -> None:
        """Drop what is buffered (a damaged stream's last bytes) and read on after a resume."""
        self.pos += len(self.buf)
        self.buf.clear()
        self.eof = False

    def peek(self, size: int) -> bytes:
        """The next `size` bytes (fewer at the end), not consumed."""
        self._fill(size)
        return bytes(self.buf[:size])

    def next(self) -> Frame | None:
        """The next frame, or None at the end of the stream."""
        while self._fill(1) and self.buf[:1] in (b"\r", b"\n"):
            self._consume(1)
        if not self.buf:
            return None
        offset = self.pos
        if not self.peek(5).startswith(b"WARC/"):
            return self._resync("malformed_record", offset, 0, b"")
        end = self._header_end()
        if end is None:
            kind = "truncated_record" if self.eof else "malformed_record"
            return self._resync(kind, offset, 0, b"")
        head = bytes(self.buf[: end.end()])
        if (cut := self._record_start_in(head, offset)) > 0:  # these headers were cut short
            self._consume(cut)
            return Frame("malformed_record", offset, cut, head=head[:cut])
        length = CONTENT_LENGTH.search(head)
        if length is None:
            return self._resync("malformed_record", offset, len(head), head)
        total = len(head) + int(length.group(1))
        if total > self.limit:
            return self._read_past(offset, head, total)
        self._fill(total + _TAIL)
        if self._followed_by_record(total) and not self._evidence_refutes(head, total):
            frame = Frame("record", offset, total, bytes(self.buf[:total]), head)
            self._consume(total)
            return frame
        found = self._next_record(len(head), offset)
        kind = "bad_content_length" if found >= 0 else "truncated_record"
        if len(self.buf) >= total:
            kind = "bad_content_length"
        return self._resync(kind, offset, len(head), head)

    def _record_start_in(self, head: bytes, offset: int) -> int:
        """Where the next record starts inside the header block `head` of the record at stream
        position `offset` (-1: it does not): a version line followed by a field line, also at the
        end of a line cut short (no header line is one; a header value ending in `WARC/1.0` with
        a field on the next line would be taken for one), or a gzip member's start."""
        found = [
            line.start()
            for line in _VERSION_LINE.finditer(head, 1)
            if _FIELD_NAME.match(head, line.end())
        ][:1]
        member_starts = getattr(self.stream, "member_starts", None)
        if member_starts is not None:
            found += [p - offset for p in member_starts(offset + 1, offset + len(head))][:1]
        return min(found, default=-1)

    def _header_end(self) -> re.Match[bytes] | None:
        """The blank line that ends the headers at the buffer's start (None: not in the first
        `HEADER_LIMIT` bytes, or the stream ends first)."""
        size = _CHUNK
        while True:
            filled = self._fill(size)
            end = HEADER_END.search(self.buf, 0, HEADER_LIMIT)
            if end is not None or not filled or size >= HEADER_LIMIT:
                return end
            size *= 4

    def _followed_by_record(self, at: int) -> bool:
        """Whether the block that ends at `at` ends where a record's should: the next record
        (after a blank line, or after fewer line breaks as warcio accepts), a blank line (what
        follows it, when it is no record, is a reject of its own), or the end of the stream."""
        if len(self.buf) < at:
            return False
        tail = bytes(self.buf[at : at + _TAIL])
        rest = tail.lstrip(b"\r\n")
        newlines = tail[: len(tail) - len(rest)].count(b"\n")
        if rest.startswith(b"WARC/") or newlines >= 2:
            return True
        return not rest and self.eof and len(self.buf) - at == len(tail)

    def _evidence_refutes(self, head: bytes, total: int) -> bool:
        """Whether what the record says of itself, when its framing is in doubt, shows its length
        wrong. In doubt: a blank line but no record follows the block (a wrong length can land on
        a blank line in a page), or the block holds a record start (a wrong length can land on a
        later record's start or end: the records between would be read as its page). Evidence,
        first that there is: its WARC-Block-Digest, its WARC-Payload-Digest (sha1, base32 or hex),
        the end of its HTTP message (the response's own Content-Length or chunking): right at the
        block's end, or at a record start elsewhere; then the framing itself, for a block that
        holds a record start: it is wrong when no line break follows it (it ends on a record's
        start), when the file ends right after it inside or after a record starting in it, when a
        record starting inside it declares a length that ends where this block does (not one that
        is the whole block: a resource archiving one record) or starts right after other bytes
        on its line and runs past its end (a record cut short and the next one written after
        it), or when records inside it follow one another and stop short (`_chain_stops_short`).
        Otherwise a record start (inside the block, or where its HTTP message ends) counts
        against it only when that record frames (`_framed_end`: ends by its own length where a
        record should): a page quoting a record (a `WARC/1.0` line and made-up fields in its
        text) is no evidence."""
        start = len(head)
        if not self._in_doubt(start, total):
            return False
        block = memoryview(self.buf)[start:total]
        try:
            if (verdict := digest_verdict(head, block)) is not None:
                return not verdict
            end = message_end(block, self.limit)
        finally:
            block.release()
        if self._glued_record_runs_past(start, total):
            return True
        if end is not None and end == total - start:
            return False
        if end is not None and self._record_at(start + end) and self._framed_end(start + end) >= 0:
            return True
        inner = self._record_starts(start, total)
        if not inner:
            return False
        tail = bytes(self.buf[total : total + _TAIL])
        newlines = tail[: len(tail) - len(tail.lstrip(b"\r\n"))].count(b"\n")
        if newlines == 0 and tail:  # it ends on a record start (or on other bytes)
            return True
        if not tail:  # the file ends with the block: wrong if it ends inside or after a record
            return any(self._declared_end(at) > total or self._framed_end(at) >= 0 for at in inner)
        if newlines < 2 and any(self._framed_end(at) >= 0 for at in inner):
            return True
        if any(at > start and self._declared_end(at) == total for at in inner):
            return True
        return self._chain_stops_short(inner, total)

    def _chain_stops_short(self, inner: list[int], total: int) -> bool:
        """Whether records inside the block follow one another as in a WARC file (one ends by
        its length where the next starts), and the chain stops short of the block's end, or runs
        past it: a length landing past two records, the later one with a wrong length too. A
        WARC file archived in a record chains to its end; a record quoted in a page ends where
        no record starts."""
        seen: set[int] = set()
        for first in inner:
            at, links = first, 0
            while at not in seen:
                seen.add(at)
                end = self._framed_end(at)
                rest = bytes(self.buf[end : end + _TAIL]) if end >= 0 else b""
                after = end + len(rest) - len(rest.lstrip(b"\r\n"))
                if 0 <= end <= total <= after:
                    break  # the chain ends with the block
                if end < 0 or end > total or not self._starts_record(after):
                    if links > 0:  # a record with a wrong length (or none after it) ends it
                        return True
                    break
                at, links = after, links + 1
        return False

    def _starts_record(self, at: int) -> bool:
        """Whether a version line followed by a header field line starts at buffer index `at`."""
        line = _VERSION_LINE.match(self.buf, at)
        return line is not None and _FIELD_NAME.match(self.buf, line.end()) is not None

    def _record_starts(self, start: int, total: int) -> list[int]:
        """Where in buffer[start:total] a version line followed by a header field line begins."""
        lines = list(_VERSION_LINE.finditer(self.buf, start, total))
        return [line.start() for line in lines if _FIELD_NAME.match(self.buf, line.end())]

    def _framed_end(self, at: int) -> int:
        """Whether the record whose headers start at buffer index `at` ends where a record
        should by its own Content-Length (`_followed_by_record`, within the record limit): a
        real record inside a block with a wrong length does, a record quoted in a page's text
        (a `WARC/1.0` line and made-up fields) mostly does not."""
        self._fill(at + _CHUNK)
        rest = bytes(self.buf[at : at + _TAIL])
        end = self._declared_end(at + min(len(rest) - len(rest.lstrip(b"\r\n")), 4))
        if end < 0 or end > self.limit:
            return -1
        self._fill(end + _TAIL)
        return end if self._followed_by_record(end) else -1

    def _holds_record_start(self, start: int, total: int) -> bool:
        """Whether buffer[start:total] holds a version line followed by a header field line."""
        return bool(self._record_starts(start, total))

    def _glued_record_runs_past(self, start: int, total: int) -> bool:
        """Whether a record starts inside buffer[start:total] right after other bytes on its
        line (a record cut short and the next written after it) and declares a block that runs
        past `total` and `_framed_end` there: the cut record's own lengths (its HTTP message's too)
        can agree with a wrong end, this record's cannot."""
        for line in list(_VERSION_LINE.finditer(self.buf, start, total)):
            at = line.start()
            glued = self.buf[at - 1 : at] not in (b"\n", b"\r")
            if not glued or not _FIELD_NAME.match(self.buf, line.end()):
                continue
            if self._declared_end(at) > total and self._framed_end(at) >= 0:
                return True
        return False

    def _record_at(self, at: int) -> bool:
        """Whether a record starts at buffer index `at`, after at most two line breaks."""
        if at > self.limit:
            return False
        self._fill(at + _TAIL + _FIELD_LOOK)
        rest = bytes(self.buf[at : at + _TAIL + _FIELD_LOOK])
        skipped = len(rest) - len(rest.lstrip(b"\r\n"))
        line = _VERSION_LINE.match(self.buf, at + min(skipped, 4))
        return line is not None and _FIELD_NAME.match(self.buf, line.end()) is not None

    def _declared_end(self, at: int) -> int:
        """Where the block of the record whose headers start at buffer index `at` ends by its
        Content-Length (-1: no whole header block with one in the buffer)."""
        end = HEADER_END.search(self.buf, at, at + HEADER_LIMIT)
        found = None if end is None else CONTENT_LENGTH.search(self.buf, at, end.end())
        return -1 if end is None or found is None else end.end() + int(found.group(1))

    def _in_doubt(self, start: int, total: int) -> bool:
        rest = bytes(self.buf[total : total + _TAIL]).lstrip(b"\r\n")
        if rest and not rest.startswith(b"WARC/"):
            return True
        member_starts = getattr(self.stream, "member_starts", None)
        if member_starts is not None and member_starts(self.pos + start + 1, self.pos + total):
            return True
        return self._holds_record_start(start, total)

    def _next_record(self, start: int, offset: int) -> int:
        """Where in the buffer, from `start`, the next record's first line begins (-1: none in
        what is buffered): a version line that `_is_record_start`, or a gzip member's start, after
        stream position `offset` (the record being read past)."""
        start, found = max(start, offset + 1 - self.pos), -1
        member_starts = getattr(self.stream, "member_starts", None)
        if member_starts is not None:
            for position in member_starts(self.pos + start, self.pos + len(self.buf)):
                found = position - self.pos
                break
        end = len(self.buf) if found < 0 else found
        while (line := _VERSION_LINE.search(self.buf, start, end)) is not None:
            if self._is_record_start(line):
                return line.start()
            start = line.start() + 1
        return found

    def _is_record_start(self, line: re.Match[bytes]) -> bool:
        """Whether a version line begins a record: it follows a blank line, or a header field
        line follows it (a `WARC/1.0` line in a page's text is neither, mostly)."""
        at = line.start()
        if self.buf[max(at - 2, 0) : at] == b"\n\n" or self.buf[max(at - 3, 0) : at] == b"\n\r\n":
            return True
        self._fill(line.end() + _FIELD_LOOK)
        return _FIELD_NAME.match(self.buf, line.end()) is not None

    def _resync(self, kind: str, offset: int, start: int, head: bytes) -> Frame:
        """A reject frame for the record at `offset`: consume up to the next record's first line
        after buffer index `start` (or to the end of the stream), holding at most a chunk."""
        while (at := self._next_record(start, offset)) < 0 and not self.eof:
            if (drop := len(self.buf) - _NEXT_KEEP) > 0:
                self._consume(drop)
            start = 0
            self._fill(len(self.buf) + _CHUNK)
        at = at if at >= 0 else len(self.buf)
        size = self.pos + at - offset
        self._consume(at)
        return Frame(kind, offset, size, head=head)

    def _read_past(self, offset: int, head: bytes, total: int) -> Frame:
        """A record over the limit: read to its declared end without holding it. A record that
        starts inside it (after a blank line) is held, up to the limit, until the declared end
        shows whether the length was right; when it was not, the framer goes on there."""
        self._consume(len(head))
        left = total - len(head)  # block bytes still to read past
        while left > 0:
            self._fill(min(left, _CHUNK) + _NEXT_KEEP)
            if not self.buf:
                return Frame("truncated_record", offset, self.pos - offset, head=head)
            start = self._next_record(0, offset)
            if 0 <= start < left:
                self._consume(start)
                left -= start
                if self._fill(min(left + _TAIL, self.limit)) and len(self.buf) < left + _TAIL:
                    self._consume(1)  # the record seen is too far to hold: look for a later one
                    left -= 1
                    continue
                if self._followed_by_record(left):
                    break
                return Frame("bad_content_length", offset, self.pos - offset, head=head)
            step = min(left, len(self.buf) if self.eof else max(len(self.buf) - _NEXT_KEEP, 1))
            self._consume(step)
            left -= step
        self._fill(left + _TAIL)
        if self._followed_by_record(left):
            self._consume(left)
            return Frame("record_too_large", offset, total, head=head)
        return self._resync("bad_content_length", offset, 0, head)
