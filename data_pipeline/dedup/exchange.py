"""The one exchange of distributed dedup: every all-to-all step through files.

Each step of the shuffle (data_pipeline.dedup.aggregate) has M producer tasks that each cut
their output into P partition pieces, and P consumer tasks that each need partition q of every
producer. Handed over as Ray objects, that would be M x P objects per step, each owned (and
tracked) by the driver, whose memory would then grow with parts x partitions.

Instead, producer i writes its P pieces of one table kind (group g) as ONE file,
`<folder>/<step>/<g>/<i>.arrow`. A consumer gets one small `Gather(folder, step, group,
producers, q)` in place of M object refs and reads only its partition's bytes from each
producer's file (a memory map locally, range reads through the output's filesystem for
`s3://`). The driver then holds O(M + P) small values per step instead of M x P objects; each
group's folder is deleted once nothing can read it again (aggregate.py says when).

A piece file (integers are little-endian uint64):

    head      the schema, one Arrow IPC message
    body      partition 0's record batches as IPC messages, then partition 1's, ..., P-1's
    index     P + 1 offsets: where each partition's bytes start, then where the body ends
    digests   P + 1 sha256: of each partition's bytes, then of the head
    trailer   P, then MAGIC

A consumer reads the trailer, three index entries, two digests, the head and its partition's
bytes: O(1) per file. It reads the file's last 4 KiB at once (the trailer, index and digests of
a file of up to ~100 partitions; all of a small file) and apart only what lies before them. The
head and the partition's bytes are checked against their sha256 before they are decoded, and
the index against the file's size and order, so a byte changed anywhere a consumer reads (at the
same size or not) is an `ExchangeFileError` naming the file, never another partition's rows.

The limit this leaves: a step costs M x P ranged reads (each consumer reads its range of every
producer's file). On local disk these are memory-mapped reads; on an object store each is about
four requests (the size, the last 4 KiB, the head, the body). The map step has one producer per
input part, so a job on `s3://` with many parts makes many requests (1,000 parts x 16
partitions: ~64,000 for the map step); fewer, larger parts (`shard_rows`) or several jobs
against the index (`index.against`) keep it down. (A two-level fan-in that merged ~sqrt(M)
producers' files first, M + P x sqrt(M) reads, was removed: 700 lines for a request count, not
a memory bound.)

The pieces read back are the pieces written (same columns, types, values and order). The same
code runs embedded (the output on local disk) and on a Ray cluster whose output is `s3://` (every
worker reads and writes the store).
Files are written whole (a producer killed while
writing leaves no file under its name) and are deterministic, so a retried producer rewrites the
same bytes and a retried consumer re-reads the same files.
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
from pretrain.storage import ObjectPath, OutPath, output_path, remove_tree, write_atomic

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
    bodies = []
    for piece in pieces:
        if piece.schema != schema:  # a piece is a slice of one table: never other columns
            raise ValueError(f"exchange piece schema {piece.schema} differs from {schema}")
        batches = piece.combine_chunks().to_batches()
        bodies.append([b.serialize().to_pybytes() for b in batches if b.num_rows])
    return b"".join(frame(schema.serialize().to_pybytes(), bodies))


def frame(head: Any, bodies: Sequence[Sequence[Any]]) -> list[Any]:
    """The chunks of a piece file (module docstring): `head` (the schema's IPC message), then
    each partition's chunks (whole IPC messages, bytes-like) in order, then index, digests and
    trailer."""
    chunks, starts, digests = [head], [len(head)], []
    for parts in bodies:
        digest, end = hashlib.sha256(), starts[-1]
        for data in parts:
            digest.update(data)
            chunks.append(data)
            end += len(data)
        starts.append(end)
        digests.append(digest.digest())
    chunks += [_U64.pack(s) for s in starts]
    return [*chunks, *digests, hashlib.sha256(head).digest(), _U64.pack(len(bodies)), MAGIC]


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
    batches = []
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        batches.append(pa.ipc.read_record_batch(message, schema))
    return pa.Table.from_batches(batches, schema)


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


def resolve(pieces: Sequence[Any]) -> list[pa.Table]:
    """`pieces` with every Gather replaced by the tables it names (in place, in order)."""
    tables: list[pa.Table] = []
    for piece in pieces:
        if isinstance(piece, Gather):
            tables.extend(piece.read())
        else:
            tables.append(piece)
    return tables


@functools.cache
def producer(func: Callable[..., list[Any]]) -> Callable[..., Any]:
    """`func` as a file producer, named after `func` (the task name Ray shows). The task runs
    `func` (its first `groups` x `partitions` returns are pieces, group by group), writes each
    group's pieces to its file (`target` = folder, step, producer index) and returns the rest:
    one value when there is one, None when there is none, else the list."""

    def task(
        groups: int, partitions: int, target: tuple[str | OutPath, str, int], *args: Any
    ) -> Any:
        out = func(*args)
        folder, step, index = target
        for group in range(groups):
            pieces = out[group * partitions : (group + 1) * partitions]
            write_pieces(piece_file(folder, step, index, group), pieces)
        rest = list(out[groups * partitions :])
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    task.__name__ = task.__qualname__ = getattr(func, "__name__", "produce")
    return task


def _tree_bytes(path: OutPath) -> int:
    """Bytes of the files under a folder (or key prefix)."""
    if isinstance(path, ObjectPath):
        return sum(size for _, size in path.files_and_sizes())  # from the listing
    if not path.is_dir():  # a producer that failed: its error comes from the step's wait
        return 0
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())


Key = tuple[str, int]
"""(step, group): one folder of piece files."""


class Scratch:
    """The driver's book of one aggregate's exchange folder: which groups' files exist, which
    tasks read them, and when they go. A group's folder is deleted once (1) the aggregate said
    no task launched later reads it (`release`), (2) every task that read it finished, and (3)
    when its readers returned Ray objects (`lineage`), once the next file step's producers,
    which consume those objects, finished too: until then Ray may rebuild a lost object (a node
    died) by running its reader again, which reads these files again. Tracks the bytes written
    and the most alive at once (`summary`)."""

    def __init__(self, folder: str | OutPath) -> None:
        self.folder = folder
        self.pending: list[tuple[str, int, list[Any]]] = []
        """Steps whose producers may still run: (step, groups, the producers' cost refs)."""
        self.created = self.finished = 0
        """File steps launched; how many of them (in order) have every producer finished."""
        self.readers: dict[Key, list[Any]] = {}
        self.retired: dict[Key, int] = {}
        """Released groups -> the number of finished file steps their deletion waits for."""
        self.live: dict[Key, int] = {}
        self.written = self.peak = 0

    def produced(self, step: str, groups: int, costs: list[Any]) -> None:
        self.created += 1
        self.pending.append((step, groups, list(costs)))

    def read_by(self, args: Sequence[Any], cost: Any) -> None:
        for arg in args:
            if isinstance(arg, Gather):
                self.readers.setdefault((arg.step, arg.group), []).append(cost)

    def release(self, columns: Sequence[Sequence[Sequence[Any]]], lineage: bool) -> None:
        """The groups named by the Gathers in `columns` are read by no task launched from now on
        (class docstring); `lineage`: their readers returned objects the next file step eats."""
        for column in columns:
            for pieces in column:
                for piece in pieces:
                    if isinstance(piece, Gather):
                        key = (piece.step, piece.group)
                        self.retired[key] = self.created + 1 if lineage else 0

    def sweep(self, ray: Any) -> None:
        """Measure the groups whose producers finished, then delete what may go (class doc)."""
        while self.pending and _done(ray, self.pending[0][2]):
            step, groups, _ = self.pending.pop(0)
            self.finished += 1
            for group in range(groups):
                size = _tree_bytes(group_folder(self.folder, step, group))
                self.live[(step, group)] = size
                self.written += size
            self.peak = max(self.peak, sum(self.live.values()))
        for key, after in list(self.retired.items()):
            if self.finished >= after and _done(ray, self.readers.get(key, [])):
                remove_tree(group_folder(self.folder, *key))
                self.live.pop(key, None)
                del self.retired[key]

    def summary(self) -> dict[str, int]:
        """Bytes of piece files written, and the most of them on disk at once (measured when a
        step's producers finished, before what that step let go was deleted)."""
        return {"written_bytes": self.written, "peak_bytes": self.peak}


def _done(ray: Any, refs: list[Any]) -> bool:
    """Every task of these result refs has finished (without waiting)."""
    if not refs:
        return True
    _, waiting = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
    return not waiting
