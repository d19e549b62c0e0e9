"""The second level of the dedup file exchange (data_pipeline.dedup.exchange): merge tasks.

With M producers and P partitions, each of the P consumers of a step reads its partition from
every producer's file: M x P range reads per step (on s3 at M = P = 256, 458,752 requests,
seven per read). From FANIN_FROM producers on, launch.Runner.scatter adds a merge step: merge
task k reads the files of producers [k*F, (k+1)*F) once each, front to back (F = fanin(M),
about sqrt(M)), checks every partition against its sha256 (a changed file is the ExchangeFileError
naming it) and writes one merged file per group in the same format, partition q holding the
producers' partition-q record batches byte for byte, in producer order. Consumers then read
ceil(M / F) merged files instead of M files: M + P x sqrt(M) reads in place of M x P.

A consumer decodes the same record batches in the same order either way, so every step sees
the same tables and the tags are byte-identical to the one-level exchange (and the object
exchange). A merge group whose producers wrote different schemas (an empty slice of a block
with other column types) is not merged: `merge` returns it and its consumers read those
producers' files one by one (exchange.Gather.unmerged). Merged files are written whole and are
deterministic, so a retried merge task rewrites the same bytes. They live in their group's
folder and are deleted with it (exchange.Scratch).

A merge streams: it never holds a file, a partition or the merged file, only one read of at
most budget.MERGE_CHUNK_BYTES and a small buffer per producer for its index and digests, so its
memory is `budget.merge_bytes`, whatever the group's size (at 40 TB a group is tens of GB).
Partition q of the merged file is partition q of each producer in turn, and every producer's
partitions lie in order in its file, so each producer's file is read once from front to back
(os.pread, no memory map: mapped pages a task touched would count in its RSS). Each producer's
partition is checked against its sha256 as it streams through; a mismatch stops the write and
no merged file appears (locally: renamed into place only when whole; s3: a failed upload is
deleted). On s3 each producer's object is first copied to a local temporary file in reads of
MERGE_CHUNK_BYTES (its size, then one GET per chunk: one for a file up to 4 MB), then read
as a local one; the merged object is a multipart upload fed chunk by chunk. Local disk for a
group's copies: ~F / M of the step's pieces, as the local exchange needs.

Cost: one more step (a barrier) with ceil(M / F) tasks, and the step's piece bytes written a
second time.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from data_pipeline.dedup import exchange
from data_pipeline.dedup.budget import MERGE_CHUNK_BYTES, MERGE_CURSOR_BYTES
from data_pipeline.dedup.exchange import MAGIC, corrupt
from pretrain.outstore import ObjectPath, OutPath

FANIN_FROM = 64
"""Below this many producers a step stays one level: at 63 producers a consumer reads 63 files
(441 s3 requests), and the merge step would add a barrier and a second write of every piece
for a small job (measured by bench_exchange_reads, now in benchmarks/RESULTS_LOG.md)."""

_U64 = struct.Struct("<Q")
_DIGEST = 32
_TAIL = _DIGEST + _U64.size + len(MAGIC)  # the head's digest, P, MAGIC


def fanin(producers: int) -> int:
    """Producers per merge group for a step of `producers` (0: one level, no merge step)."""
    if producers < FANIN_FROM:
        return 0
    return math.isqrt(producers - 1) + 1  # ceil(sqrt)


def merge(
    folder: str,
    step: str,
    groups: int,
    partitions: int,
    index: int,
    first: int,
    last: int,
    *ready: Any,
) -> list[int]:
    """Merge the files of producers [first, last) of each group of one step into the merged
    files of merge group `index` (module docstring). `ready`: the producers' results (the task
    runs once they exist; unused). Returns the groups it did not merge."""
    del ready
    unmerged = []
    with tempfile.TemporaryDirectory(prefix="pretrain-fanin-") as spill:  # s3 copies only
        for group in range(groups):
            with contextlib.ExitStack() as stack:
                sources = [
                    stack.enter_context(
                        _Source(exchange.piece_file(folder, step, i, group), partitions, spill)
                    )
                    for i in range(first, last)
                ]
                if len({source.head for source in sources}) > 1:
                    unmerged.append(group)
                    continue
                path = exchange.merged_file(folder, step, index, group)
                exchange.write_chunks(path, _merged(sources, partitions))
    return unmerged


def _merged(sources: Sequence[_Source], partitions: int) -> Iterator[bytes]:
    """The chunks of the merged file (exchange.frame's layout): partition q of every source in
    turn, for q = 0 .. P-1, then the index, the digests and the trailer."""
    head = sources[0].head
    yield head
    starts, digests = [len(head)], bytearray()
    for q in range(partitions):
        digest, end = hashlib.sha256(), starts[-1]
        for source in sources:
            for data in source.partition(q):
                digest.update(data)
                end += len(data)
                yield data
        starts.append(end)
        digests += digest.digest()
    yield struct.pack(f"<{len(starts)}Q", *starts)
    yield bytes(digests)
    yield hashlib.sha256(head).digest()
    yield _U64.pack(partitions)
    yield MAGIC


class _Source:
    """One producer's piece file open for a streaming merge: its trailer, the ends of its index
    and its head checked on entry; then `partition(q)` for q = 0, 1, ... in order streams each
    partition's bytes in chunks and checks them against their sha256 (ExchangeFileError naming
    the producer's file). On s3 the file is read from a local copy, deleted on exit."""

    def __init__(self, path: OutPath, partitions: int, spill: str) -> None:
        self.path = path
        self.local = _copy(path, spill) if isinstance(path, ObjectPath) else None
        self.fd = os.open(self.local or str(path), os.O_RDONLY)
        try:
            self.head = self._open(partitions)
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> _Source:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        if self.local is not None:
            os.unlink(self.local)

    def _read(self, size: int, at: int) -> bytes:
        data = os.pread(self.fd, size, at)
        if len(data) != size:
            raise corrupt(self.path, "is shorter than its index says")
        return data

    def _open(self, partitions: int) -> bytes:
        size = os.fstat(self.fd).st_size
        tail = size - _TAIL
        if tail < 0 or os.pread(self.fd, len(MAGIC), size - len(MAGIC)) != MAGIC:
            raise corrupt(self.path, "does not end in the exchange's format marker")
        count = _U64.unpack(self._read(_U64.size, tail + _DIGEST))[0]
        index = tail - count * _DIGEST - (count + 1) * _U64.size
        if count != partitions or index < 0:
            raise corrupt(self.path, f"records {count} partitions, not {partitions}")
        first = _U64.unpack(self._read(_U64.size, index))[0]
        last = _U64.unpack(self._read(_U64.size, index + count * _U64.size))[0]
        if not 0 < first <= index == last:
            raise corrupt(self.path, "has a broken index")
        head = self._read(first, 0)
        if hashlib.sha256(head).digest() != self._read(_DIGEST, tail):
            raise corrupt(self.path, "has a schema that does not match its sha256")
        self.index = _Cursor(self, index + _U64.size, count * _U64.size)
        self.digests = _Cursor(self, index + (count + 1) * _U64.size, count * _DIGEST)
        self.at, self.end = first, index
        return head

    def partition(self, q: int) -> Iterator[bytes]:
        """Partition q's bytes in chunks of at most MERGE_CHUNK_BYTES (the next partition)."""
        end = _U64.unpack(self.index.take(_U64.size))[0]
        if not self.at <= end <= self.end:
            raise corrupt(self.path, "has a broken index")
        digest, at = hashlib.sha256(), self.at
        while at < end:
            data = self._read(min(MERGE_CHUNK_BYTES, end - at), at)
            digest.update(data)
            at += len(data)
            yield data
        if digest.digest() != self.digests.take(_DIGEST):
            raise corrupt(self.path, f"has partition {q} not matching its sha256")
        self.at = end


class _Cursor:
    """Fixed-width entries of one region of a source's file, taken in order through a buffer of
    MERGE_CURSOR_BYTES (a merge of F producers holds 2 F of them, not F indexes)."""

    def __init__(self, source: _Source, start: int, size: int) -> None:
        self.source, self.next, self.end = source, start, start + size
        self.buffer, self.at = b"", 0

    def take(self, width: int) -> bytes:
        if self.at + width > len(self.buffer):
            size = min(max(MERGE_CURSOR_BYTES, width), self.end - self.next)
            self.buffer = self.buffer[self.at :] + self.source._read(size, self.next)
            self.next, self.at = self.next + size, 0
        data = self.buffer[self.at : self.at + width]
        self.at += width
        return data


def _copy(path: ObjectPath, spill: str) -> str:
    """A local copy of the object `path` (its size, then one GET per MERGE_CHUNK_BYTES)."""
    local = os.path.join(spill, path.name)
    with path.fs.open_input_file(path.key) as source, open(local, "wb") as sink:
        size, at = source.size(), 0
        while at < size:
            data = source.read_at(min(MERGE_CHUNK_BYTES, size - at), at)
            if not data:
                break
            sink.write(data)
            at += len(data)
    return local
