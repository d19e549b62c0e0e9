"""The file-based exchange of distributed dedup: every all-to-all step through files.

Each step of the shuffle (data_pipeline.dedup.distributed) has M producer tasks that each cut
their output into P partition pieces, and P consumer tasks that each need partition q of every
producer. Handed over as Ray objects, that is M x P objects per step, each owned (and tracked) by
the driver: the reason `budget.MAX_PARTITIONS` caps a job near 4,096 partitions.

Through files, producer i writes its P pieces of one table kind as ONE Arrow IPC file,
`<folder>/<step>/<i>.<group>.arrow`, the pieces in partition order, and the schema's metadata
holds the per-partition offset index (`partition q` = record batches `offsets[q]` to
`offsets[q+1]`). A consumer gets one small `Gather(folder, step, group, producers, q)` in place
of M object refs and reads only its partition's batches from each producer's file (a random-
access read of the footer and of those batches, local or through the output's filesystem for
`s3://`). The driver then holds O(M + P) small values per step instead of M x P objects.

The pieces read back are the pieces written (same columns, types, values and order), so the
tags are byte-identical to the object exchange. Files are written atomically (a producer killed
while writing leaves no file under its name) and are deterministic, so a retried producer
rewrites the same bytes and a retried consumer re-reads the same files.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pretrain.outstore import ObjectPath, OutPath, output_path, write_atomic

OFFSETS_KEY = b"pretrain.exchange.offsets"
"""Schema metadata key of a piece file's per-partition batch offsets (JSON list, P + 1 ints)."""


def piece_file(folder: str, step: str, producer: int, group: int) -> OutPath:
    return output_path(folder) / step / f"{producer:07d}.{group}.arrow"


def write_pieces(path: OutPath, pieces: Sequence[pa.Table]) -> None:
    """Write the partition pieces of one producer (one schema) as one IPC file with its index."""
    schema = pieces[0].schema
    batches: list[list[pa.RecordBatch]] = []
    for piece in pieces:
        if piece.schema != schema:  # a piece is a slice of one table: never other columns
            raise ValueError(f"exchange piece schema {piece.schema} differs from {schema}")
        batches.append([b for b in piece.combine_chunks().to_batches() if b.num_rows])
    offsets = [0]
    for group in batches:
        offsets.append(offsets[-1] + len(group))
    metadata = dict(schema.metadata or {})
    metadata[OFFSETS_KEY] = json.dumps(offsets).encode()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema.with_metadata(metadata)) as writer:
        for group in batches:
            for batch in group:
                writer.write_batch(batch)
    if isinstance(path, ObjectPath):
        write_atomic(path, sink.getvalue().to_pybytes())
        return
    # Renamed into place (a reader never sees half a file) but not fsynced: a piece file lives
    # for one aggregate, which a crash re-runs from the persisted map side in a fresh folder
    # (per file, an fsync cost more wall than the step's work on a busy disk).
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(memoryview(sink.getvalue()))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_piece(path: OutPath, partition: int) -> pa.Table:
    """Partition `partition` of the pieces in `path` (write_pieces), with their schema."""
    if isinstance(path, ObjectPath):
        source: Any = path.fs.open_input_file(path.key)
    else:
        source = pa.memory_map(str(path))
    with source:
        reader = pa.ipc.open_file(source)
        metadata = dict(reader.schema.metadata or {})
        offsets = json.loads(metadata.pop(OFFSETS_KEY))
        schema = (
            reader.schema.with_metadata(metadata) if metadata else reader.schema.remove_metadata()
        )
        first, last = offsets[partition], offsets[partition + 1]
        batches = [reader.get_batch(k) for k in range(first, last)]
        return pa.Table.from_batches(batches, schema)


@dataclass(frozen=True)
class Gather:
    """Partition `partition` of group `group` of every producer of one step (module docstring):
    what a consumer receives in place of one object ref per producer."""

    folder: str
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
    """`func` as a file producer (`produce`), named after `func` (the task name Ray shows)."""

    def task(groups: int, partitions: int, target: tuple[str, str, int], *args: Any) -> Any:
        return produce(func, groups, partitions, target, *args)

    task.__name__ = task.__qualname__ = getattr(func, "__name__", "produce")
    return task


def produce(
    func: Callable[..., list[Any]],
    groups: int,
    partitions: int,
    target: tuple[str, str, int],
    *args: Any,
) -> Any:
    """Run a producer `func` (its first `groups` x `partitions` returns are pieces, group by
    group), write each group's pieces to its file (`target` = folder, step, producer index) and
    return the rest: one value when there is one, None when there is none, else the list."""
    out = func(*args)
    folder, step, producer = target
    for group in range(groups):
        pieces = out[group * partitions : (group + 1) * partitions]
        write_pieces(piece_file(folder, step, producer, group), pieces)
    rest = list(out[groups * partitions :])
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest
