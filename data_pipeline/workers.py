"""What runs inside Ray Data's stream: the file reader, the map-stage actor and the pieces.

Tagged rows leave the stages as *pieces*: `.parts/pieces/<shard>/<first>-<last>.<sha256>.parquet`,
one per shard present in a batch, named by the rows it holds and the sha256 of its bytes (so the
name and the bytes land in one rename, and a piece changed after it was written is an error naming
it when read, never rows: `read_pieces`). When the stream is done, one merge task per
shard concatenates its pieces in row order (dropping rows a retried task wrote twice) and writes
the shard (data_pipeline.merge). No shuffle, no barrier inside the stream, and every output is
deterministic for the same input: a task retried after a worker dies, or a job re-run after the
driver dies, writes byte-identical files (atomic renames). What a run records of its progress,
and what resume reads of it, is data_pipeline.parts.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline import piece_maps, throughput
from data_pipeline.parts import pieces_dir, read_stats_path
from data_pipeline.readers import InputFile, read_file
from data_pipeline.stages.base import StageSpec, build_stage
from pretrain.errors import PretrainError
from pretrain.storage import OutPath, listed, output_path, write_atomic, write_json

__all__ = ["MapStagesWorker", "StageSpec", "build_stage"]


def read_files(
    batch: pa.Table, *, out: str | OutPath, skip: dict[str, list[int]], options: dict[str, Any]
) -> Iterator[pa.Table]:
    """Map function: each input row names one file; stream its raw records in batches."""
    for item in batch.to_pylist():
        source = InputFile(item["path"], item["format"], item["stem"])
        stats: dict[str, int] = {}
        batches = read_file(
            source, skip_parts=frozenset(skip.get(source.stem, ())), stats=stats, **options
        )
        yield from throughput.timed_read(out, batches)
        parts = -(-stats["records"] // options["shard_rows"])
        write_json(read_stats_path(output_path(out), source.stem), {**stats, "parts": parts})


class MapStagesWorker:
    """A Ray Data actor: builds the map stages once (setup per worker) and runs them in order.

    It is called once per block the reader produced (so a task is one block: at most
    `ray.block_mb` of input, and the pool deals blocks, not bundles of them, to its actors: no
    actor is left with a long last task while another idles), and runs the stages over slices
    of at most `batch_rows` rows of it.
    With `pieces_out`, it also writes its output as pieces (the last segment of the job) and
    returns only their row counts, so tagged text never travels back through the object store.
    With `cost_out`, it records each stage's CPU-seconds per block (data_pipeline.throughput).
    """

    def __init__(
        self,
        specs: Sequence[StageSpec],
        pieces_out: str | OutPath | None = None,
        cost_out: str | OutPath | None = None,
        batch_rows: int | None = None,
        map_spec: StageSpec | None = None,
    ) -> None:
        self.refused: PretrainError | None = None
        try:
            self._build(specs, pieces_out, cost_out, batch_rows, map_spec)
        except PretrainError as exc:
            # Raised here, Ray reports an actor that died in its creation task (its traceback as
            # text, the error lost): raised by the first call, it reaches the user as one line.
            # An actor given no block is never called: the driver reads it (raise_refusal).
            self.refused = exc
            if (out := cost_out or pieces_out) is not None:
                _record_refusal(out, exc)

    def _build(
        self,
        specs: Sequence[StageSpec],
        pieces_out: str | OutPath | None,
        cost_out: str | OutPath | None,
        batch_rows: int | None,
        map_spec: StageSpec | None,
    ) -> None:
        self.stages = [build_stage(spec) for spec in specs]
        self.mapped = build_stage(map_spec) if map_spec and pieces_out else None
        """The first global stage, whose map side this actor computes per piece (piece_maps)."""
        self.pieces_out = pieces_out
        self.cost_out = cost_out
        self.batch_rows = batch_rows
        set_up = [*self.stages, *([self.mapped] if self.mapped else [])]
        if cost_out:
            throughput.record_setup(cost_out, set_up)
        else:
            for stage in set_up:
                stage.setup()

    def __call__(self, block: pa.Table) -> pa.Table:
        if self.refused is not None:
            raise self.refused
        rows = block.num_rows
        step = self.batch_rows or rows or 1
        outputs, spent = [], dict[str, float]()
        for start in range(0, max(rows, 1), step):
            tagged, cost = throughput.run_stages(self.stages, block.slice(start, step))
            for stage, seconds in cost.items():
                spent[stage] = spent.get(stage, 0.0) + seconds
            if self.pieces_out:
                tagged = write_mapped_pieces(tagged, self.pieces_out, self.mapped)
            outputs.append(tagged)
        if self.cost_out:
            throughput.record_batch(self.cost_out, f"map-{self.stages[0].name}", block, spent)
        return pa.concat_tables(outputs, promote_options="default")


REFUSED = ".refused"
"""Under the run's cost folder (cleared at each run's start): one record per map actor whose
stages refused in its constructor."""


def _record_refusal(out: str | OutPath, exc: PretrainError) -> None:
    target = throughput.cost_dir(output_path(out)) / REFUSED
    target.mkdir(parents=True, exist_ok=True)
    name = f"{socket.gethostname()}-{os.getpid()}-{id(exc)}.json"
    write_json(target / name, {"error": type(exc).__name__, "message": str(exc)})


def raise_refusal(out: OutPath) -> None:
    """Raise (one line, its own class) the refusal a map actor recorded in its constructor, if
    one did: an actor given no block (no documents to read) never raised it itself, and the run
    would have ended as a success with a stage that could not be set up."""
    folder = throughput.cost_dir(out) / REFUSED
    found = listed(folder, "*.json") if folder.is_dir() else []
    if not found:
        return
    record = json.loads(found[0].read_bytes())
    kinds = {c.__name__: c for c in _subclasses(PretrainError)}
    raise kinds.get(record.get("error"), PretrainError)(str(record.get("message")))


def _subclasses(kind: type[PretrainError]) -> list[type[PretrainError]]:
    return [kind] + [s for c in kind.__subclasses__() for s in _subclasses(c)]


def write_pieces(batch: pa.Table, out: str | OutPath) -> pa.Table:
    """Write the rows of each shard present in `batch` as one piece; return {shard, rows}."""
    return write_mapped_pieces(batch, out, None)


def write_mapped_pieces(batch: pa.Table, out: str | OutPath, mapped: Any) -> pa.Table:
    """write_pieces; with `mapped` (a global stage), each piece's map side is written first
    (data_pipeline.piece_maps)."""
    shards, counts = [], []
    for shard in sorted(set(batch.column("_shard").to_pylist())):
        piece = batch.filter(pc.equal(batch.column("_shard"), shard))
        rows = piece.column("_row")
        first, last = pc.min(rows).as_py(), pc.max(rows).as_py()
        name = f"{first:012d}-{last:012d}"
        target = pieces_dir(output_path(out), shard)
        if mapped is not None:  # before the rows: rows without a map record are mapped whole
            piece_maps.write(mapped, piece, target, name)
        target.mkdir(parents=True, exist_ok=True)
        sink = pa.BufferOutputStream()
        pq.write_table(piece, sink, compression="lz4")
        data = sink.getvalue().to_pybytes()
        write_atomic(target / f"{name}.{hashlib.sha256(data).hexdigest()}.parquet", data)
        shards.append(shard)
        counts.append(piece.num_rows)
    return pa.table({"shard": pa.array(shards, pa.string()), "rows": pa.array(counts, pa.int64())})


def _read_piece(path: OutPath) -> pa.Table:
    """The rows of one piece, once its bytes have the sha256 its name records."""
    name = path.name.removesuffix(".parquet")
    rows, _, recorded = name.partition(".")
    data = path.read_bytes()
    if len(recorded) != 64 or hashlib.sha256(data).hexdigest() != recorded:
        raise PretrainError(
            f"row piece {path} does not have the sha256 its name records (changed after it was "
            "written: a disk error or a second writer); re-run the command (pieces are made again)"
        )
    return pq.read_table(pa.BufferReader(data))


def read_pieces(out: OutPath, shard: str) -> pa.Table:
    """All rows of one shard in row order, each row once (retries may have written some twice);
    a piece whose bytes changed since it was written is an error (`_read_piece`)."""
    paths = listed(pieces_dir(out, shard), "*.parquet")
    table = pa.concat_tables([_read_piece(p) for p in paths]).sort_by("_row")
    rows = table.column("_row").to_numpy()
    if len(rows) > 1 and (rows[1:] == rows[:-1]).any():
        keep = [True, *(rows[1:] != rows[:-1]).tolist()]
        table = table.filter(pa.array(keep, pa.bool_()))
    return table
