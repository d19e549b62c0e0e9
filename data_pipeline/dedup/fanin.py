"""The second level of the dedup file exchange (data_pipeline.dedup.exchange): merge tasks.

With M producers and P partitions, each of the P consumers of a step reads its partition from
every producer's file: M x P range reads per step (on s3 at M = P = 256, 458,752 requests,
seven per read). From FANIN_FROM producers on, launch.Runner.scatter adds a merge step: merge
task k reads the files of producers [k*F, (k+1)*F) whole (one read each; F = fanin(M), about
sqrt(M)), checks every partition against its sha256 (a changed file is the ExchangeFileError
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

Cost: one more step (a barrier) with ceil(M / F) tasks, and the step's piece bytes written a
second time. A merge task holds its group's files (~F / M of the step's pieces) at once: memory
maps locally, in memory for s3 (one GET each); F ~ sqrt(M) keeps that ~1 / sqrt(M) of a step.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import pyarrow as pa

from data_pipeline.dedup import exchange
from data_pipeline.dedup.exchange import MAGIC, corrupt
from pretrain.outstore import ObjectPath, OutPath

FANIN_FROM = 64
"""Below this many producers a step stays one level: at 63 producers a consumer reads 63 files
(441 s3 requests), and the merge step would add a barrier and a second write of every piece
for a small job (benchmarks/bench_exchange_reads.py measures both)."""

_U64 = struct.Struct("<Q")
_DIGEST = 32


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
    for group in range(groups):
        sources = [
            _whole(exchange.piece_file(folder, step, i, group), partitions)
            for i in range(first, last)
        ]
        heads = {bytes(head) for head, _ in sources}
        if len(heads) > 1:
            unmerged.append(group)
            continue
        bodies = [[bodies[q] for _, bodies in sources] for q in range(partitions)]
        path = exchange.merged_file(folder, step, index, group)
        exchange.write_chunks(path, exchange.frame(sources[0][0], bodies))
    return unmerged


def _whole(path: OutPath, partitions: int) -> tuple[memoryview, list[memoryview]]:
    """(head, each partition's bytes) of a whole piece file, every part checked against its
    sha256 and the index against the file's size (ExchangeFileError naming `path`)."""
    if isinstance(path, ObjectPath):
        with path.fs.open_input_stream(path.key) as handle:
            view = memoryview(handle.read())
    else:
        view = memoryview(pa.memory_map(str(path)).read_buffer())
    return _checked(path, view.cast("B"), partitions)  # bytes, not signed chars, to compare


def _checked(
    path: OutPath, view: memoryview, partitions: int
) -> tuple[memoryview, list[memoryview]]:
    size = len(view)
    tail = size - _DIGEST - _U64.size - len(MAGIC)
    if tail < 0 or view[size - len(MAGIC) :] != MAGIC:
        raise corrupt(path, "does not end in the exchange's format marker")
    count = _U64.unpack_from(view, tail + _DIGEST)[0]
    index = tail - count * _DIGEST - (count + 1) * _U64.size
    if count != partitions or index < 0:
        raise corrupt(path, f"records {count} partitions, not {partitions}")
    starts = struct.unpack_from(f"<{count + 1}Q", view, index)
    if not (starts[0] > 0 and starts[-1] == index and list(starts) == sorted(starts)):
        raise corrupt(path, "has a broken index")
    digests = index + (count + 1) * _U64.size
    head = view[: starts[0]]
    if hashlib.sha256(head).digest() != view[tail : tail + _DIGEST]:
        raise corrupt(path, "has a schema that does not match its sha256")
    bodies = []
    for q in range(count):
        body = view[starts[q] : starts[q + 1]]
        if (
            hashlib.sha256(body).digest()
            != view[digests + q * _DIGEST : digests + (q + 1) * _DIGEST]
        ):
            raise corrupt(path, f"has partition {q} not matching its sha256")
        bodies.append(body)
    return head, bodies
