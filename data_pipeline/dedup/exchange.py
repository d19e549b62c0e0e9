"""The one exchange of distributed dedup: every all-to-all step through files.

A step has M producer tasks that each cut their output into P partition pieces, and P consumers
that each need partition q of every producer. As Ray objects that would be M x P objects owned
by the driver; instead producer i writes its P pieces of one table kind (group g) as ONE file,
`<folder>/<step>/<g>/<i>.arrow`, and a consumer gets one small `Gather` and reads only its
partition's bytes of each producer's file (a memory map locally, range reads on `s3://`).

A piece file (integers are little-endian uint64):

    head      the schema, one Arrow IPC message
    body      partition 0's record batches as IPC messages, then partition 1's, ..., P-1's
    index     P + 1 offsets: where each partition's bytes start, then where the body ends
    digests   P + 1 sha256: of each partition's bytes, then of the head
    trailer   P, then MAGIC

A consumer reads the file's last 4 KiB at once (trailer, index and digests of up to ~100
partitions), then the head and its partition's bytes, each checked against its sha256 before it
is decoded: a byte changed anywhere a consumer reads is an `ExchangeFileError` naming the file,
never another partition's rows. On an object store that is about four requests per (producer,
partition): a job with many parts on `s3://` makes many (docs/data.md says how to keep it down).
Files are written whole and are deterministic, so a retried producer rewrites the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pretrain.errors import ArtifactError
from pretrain.storage import ObjectPath, OutPath, output_path, write_atomic

MAGIC = b"PTXCHG01"
"""The last 8 bytes of a piece file (module docstring): its format and version."""

_U64 = struct.Struct("<Q")
_DIGEST = 32
_TAIL = _DIGEST + _U64.size + len(MAGIC)  # the head's digest, P, MAGIC
_LAST_BLOCK = 4096
"""Bytes a consumer reads from a piece file's end at once (module docstring)."""


class ExchangeFileError(ArtifactError):
    """A piece file of the dedup exchange is not what its producer wrote."""


def corrupt(path: OutPath, what: str) -> ExchangeFileError:
    return ExchangeFileError(
        f"dedup exchange file {path} {what}: it changed after its producer wrote it (a disk "
        "error or another writer); run the same command again: the aggregate starts over from "
        "the persisted map side in a fresh exchange folder"
    )


def group_folder(folder: str | OutPath, step: str, group: int) -> OutPath:
    """The folder of one step's files of one group (one table kind), deleted as a whole."""
    return output_path(folder) / step / str(group)


def piece_file(folder: str | OutPath, step: str, producer: int, group: int) -> OutPath:
    return group_folder(folder, step, group) / f"{producer:07d}.arrow"


def encode_pieces(pieces: Sequence[pa.Table]) -> bytes:
    """The bytes of one piece file (module docstring) holding `pieces` (one schema), in order."""
    schema = pieces[0].schema
    if any(pa.types.is_dictionary(field.type) for field in schema):
        raise TypeError(f"exchange pieces hold no dictionary columns: {schema}")
    head = schema.serialize().to_pybytes()
    chunks, starts, digests = [head], [len(head)], []
    for piece in pieces:
        if piece.schema != schema:  # a piece is a slice of one table: never other columns
            raise ValueError(f"exchange piece schema {piece.schema} differs from {schema}")
        digest, end = hashlib.sha256(), starts[-1]
        for batch in piece.combine_chunks().to_batches():
            if batch.num_rows:
                data = batch.serialize().to_pybytes()
                digest.update(data)
                chunks.append(data)
                end += len(data)
        starts.append(end)
        digests.append(digest.digest())
    chunks += [_U64.pack(s) for s in starts]
    tail = [hashlib.sha256(head).digest(), _U64.pack(len(pieces)), MAGIC]
    return b"".join([*chunks, *digests, *tail])


def write_pieces(path: OutPath, pieces: Sequence[pa.Table]) -> None:
    """Write the partition pieces of one producer (one schema) as one piece file, chunk by chunk
    (an object: one multipart upload). A full disk is the OSError that names `path`
    (pretrain.program prints it as the disk-full line). Renamed into place but not fsynced: a
    piece file lives for one aggregate, which a crash re-runs from the persisted map side."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, [encode_pieces(pieces)], durable=False)


def read_piece(path: OutPath, partition: int) -> pa.Table:
    """Partition `partition` of the pieces in `path` (write_pieces), with their schema, after
    its bytes and the schema's were checked against their sha256 (ExchangeFileError)."""
    if isinstance(path, ObjectPath):
        source: Any = path.fs.open_input_file(path.key)
    else:
        source = pa.memory_map(str(path))
    with source:
        head, body = _checked_bytes(path, source, partition)
    schema = pa.ipc.read_schema(pa.py_buffer(head))
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(body)))
    return pa.Table.from_batches([pa.ipc.read_record_batch(m, schema) for m in reader], schema)


def _checked_bytes(path: OutPath, source: Any, partition: int) -> tuple[bytes, bytes]:
    """(head, partition's bytes) of an open piece file, each matching its recorded sha256."""
    size = source.size()
    if size < _TAIL:
        raise corrupt(path, f"is {size} bytes, shorter than a piece file's trailer")
    block_start = max(0, size - _LAST_BLOCK)
    block = source.read_at(size - block_start, block_start)

    def read_at(nbytes: int, offset: int) -> bytes:
        """The file's bytes at `offset`: from its last block when they lie in it (one request
        on an object store for the trailer, index and digests of a file of up to ~100
        partitions, and all of a small file), else a read of their own."""
        if offset >= block_start:
            return block[offset - block_start : offset - block_start + nbytes]
        return source.read_at(nbytes, offset)

    tail = read_at(_TAIL, size - _TAIL)
    head_digest, count = tail[:_DIGEST], _U64.unpack_from(tail, _DIGEST)[0]
    if tail[-len(MAGIC) :] != MAGIC:
        raise corrupt(path, "does not end in the exchange's format marker")
    index = size - _TAIL - count * _DIGEST - (count + 1) * _U64.size
    if partition >= count or index < 0:
        raise corrupt(path, f"records {count} partitions, not partition {partition}")
    first = _U64.unpack(read_at(_U64.size, index))[0]
    start, end = struct.unpack("<QQ", read_at(2 * _U64.size, index + partition * 8))
    if not 0 < first <= start <= end <= index:
        raise corrupt(path, f"has a broken index for partition {partition}")
    digest = read_at(_DIGEST, index + (count + 1) * _U64.size + partition * _DIGEST)
    head, body = read_at(first, 0), read_at(end - start, start)
    if hashlib.sha256(head).digest() != head_digest:
        raise corrupt(path, "has a schema that does not match its sha256")
    if hashlib.sha256(body).digest() != digest:
        raise corrupt(path, f"has partition {partition} not matching its sha256")
    return head, body


@dataclass(frozen=True)
class Gather:
    """Partition `partition` of group `group` of every producer of one step (module docstring):
    what a consumer receives in place of one object ref per producer."""

    folder: str | OutPath
    step: str
    group: int
    producers: int
    partition: int

    def read(self) -> list[pa.Table]:
        """The producers' pieces of this partition, in producer order."""
        return [
            read_piece(piece_file(self.folder, self.step, i, self.group), self.partition)
            for i in range(self.producers)
        ]


@functools.cache
def producer(func: Callable[..., list[Any]]) -> Callable[..., Any]:
    """`func` as a file producer, named after `func` (the task name Ray shows). `func` returns
    `groups` x `partitions` pieces, group by group, then one info value; the task writes each
    group's pieces to its file (`target` = folder, step, producer index) and returns the info."""

    def task(
        groups: int, partitions: int, target: tuple[str | OutPath, str, int], *args: Any
    ) -> Any:
        out = func(*args)
        folder, step, index = target
        for group in range(groups):
            pieces = out[group * partitions : (group + 1) * partitions]
            write_pieces(piece_file(folder, step, index, group), pieces)
        (info,) = out[groups * partitions :]
        return info

    task.__name__ = task.__qualname__ = getattr(func, "__name__", "produce")
    return task


def tree_bytes(path: OutPath) -> int:
    """Bytes of the files under a folder (or key prefix)."""
    if isinstance(path, ObjectPath):
        return sum(size for _, size in path.files_and_sizes())  # from the listing
    if not path.is_dir():
        return 0
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
