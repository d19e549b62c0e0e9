"""A gzip stream read member by member, that stops at damage instead of losing what came before
(.jsonl.gz, .json.gz, .html.gz; a .warc.gz is warcio's, data_pipeline.warc).

`gzip.GzipFile` decompresses a whole read request at once: a member cut short or corrupt raises
inside the read, so the lines decoded in that same request (up to 16 KB before the damage, a
whole small file) are lost. `GzipMembers` hands out bytes as soon as zlib produces them; at
damage it records what happened (`damage`) and reads as the end of the stream. `resume()` then
looks for the next member's magic bytes, so a multi-member file goes on after a corrupt member.
"""

from __future__ import annotations

import io
import zlib
from collections import deque
from typing import Any

_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 64 * 1024
_RECENT = 8 << 20
"""Compressed bytes kept from the current member's start: a member cut short can decode the
members after it as garbage (zlib fails only later, or at the end of the file), and `resume`
goes back to the first magic after the damaged member's start when its bytes are still held."""


class GzipMembers(io.RawIOBase):
    """Decoded bytes of the gzip members in `raw`; `damage` is set (and reading ends) at damage:
    "corrupt_gzip" (zlib refused the data) or "truncated" (the file ends inside a member)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.pending = b""  # compressed bytes read from `raw`, not yet given to zlib
        self.raw_offset = 0  # offset in the file of pending[0]
        self.damage: str | None = None
        self.damage_offset = 0
        self._member_start = 0  # file offset of the member being read (or the damaged one)
        self._inflater: Any = None
        self._raw_eof = False
        self._recent: deque[tuple[int, bytes]] = deque()  # (file offset, chunk) since its start
        self._recent_size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._next(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _fill(self) -> bool:
        if self._raw_eof:
            return False
        chunk = self.raw.read(_CHUNK)
        if not chunk:
            self._raw_eof = True
            return False
        self._recent.append((self.raw_offset + len(self.pending), chunk))
        self._recent_size += len(chunk)
        while self._recent_size > _RECENT and len(self._recent) > 1:
            self._recent_size -= len(self._recent.popleft()[1])
        self.pending += chunk
        return True

    def _forget_before(self, offset: int) -> None:
        """Drop the kept chunks that end before file offset `offset` (a member's start)."""
        while self._recent and self._recent[0][0] + len(self._recent[0][1]) <= offset:
            self._recent_size -= len(self._recent.popleft()[1])

    def _next(self, size: int) -> bytes:
        while self.damage is None:
            if self._inflater is None:
                if not self.pending and not self._fill():
                    return b""  # a clean end between members
                self._inflater = zlib.decompressobj(wbits=31)
                self._member_start = self.raw_offset
                self._forget_before(self.raw_offset)
            if self._inflater.unconsumed_tail:
                data = self._feed(self._inflater.unconsumed_tail, size, tail=True)
            elif self.pending or self._fill():
                data = self._feed(self.pending, size, tail=False)
            else:
                self._fail("truncated")
                return b""
            if data:
                return data
        return b""

    def _feed(self, compressed: bytes, size: int, *, tail: bool) -> bytes:
        before = len(compressed)
        try:
            data = self._inflater.decompress(compressed, size)
        except zlib.error:
            if tail:  # keep the bytes zlib still held: the next member may start in them
                self.pending, self.raw_offset = compressed + self.pending, self.raw_offset - before
            self._fail("corrupt_gzip")
            return b""
        if not tail:
            self.pending = b""
            self.raw_offset += before
        if self._inflater.eof:  # the member ended: what follows it is the next member's
            rest = self._inflater.unused_data
            self.raw_offset -= len(rest)
            self.pending = rest + self.pending
            self._inflater = None
        return data

    def _fail(self, kind: str) -> None:
        self.damage, self.damage_offset = kind, self.raw_offset
        self._inflater = None

    def resume(self) -> bool:
        """After damage, go on at the next member's magic bytes: False when the file has none."""
        self.damage = None
        # Past the damaged member's own magic only: the next member's may be the first byte left.
        damaged_start = self._member_start
        if self._recent and self._recent[0][0] <= damaged_start < self.raw_offset:
            held = b"".join(chunk for _, chunk in self._recent)
            self.pending = held[damaged_start - self._recent[0][0] :]
            self.raw_offset = damaged_start
        skip = max(damaged_start + 1 - self.raw_offset, 0)
        while True:
            found = self.pending.find(_MAGIC, skip)
            if found >= 0:
                self.raw_offset += found
                self.pending = self.pending[found:]
                return True
            keep = max(len(self.pending) - len(_MAGIC) + 1, skip)
            self.raw_offset += keep
            self.pending, skip = self.pending[keep:], 0
            if not self._fill():
                self.pending = b""
                return False
