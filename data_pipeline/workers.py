"""What runs inside Ray Data: the file reader, the map-stage actor, piece and shard writers.

Tagged rows leave the stages as *pieces*: `.parts/pieces/<shard>/<first>-<last>.parquet`, one per
shard present in a batch, named by the rows it holds. When the stream is done, one merge task per
shard concatenates its pieces in row order (dropping rows a retried task wrote twice), applies the
job's select and writes the shard, its rejects and its ledger fragment. No shuffle, no barrier
inside the stream, and every output is deterministic for the same input: a task retried after a
worker dies, or a job re-run after the driver dies, writes byte-identical files (atomic renames).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline import ledger, piece_maps, throughput
from data_pipeline.readers import InputFile, read_file
from data_pipeline.stages.base import StageSpec, build_stage
from pretrain import shards_layout as layout
from pretrain.errors import PretrainError
from pretrain.outstore import (
    ObjectPath,
    OutPath,
    listed,
    output_path,
    read_parquet,
    remove_tree,
    sha256_of,
    write_atomic,
    write_json,
)
from pretrain.schema import conform

PARTS = layout.PARTS_DIR
"""Hidden work area of an output: per-shard ledger fragments and per-input read counts."""
PIECES = "pieces"
GLOBAL = layout.GLOBAL_MAP_DIR.removeprefix(f"{PARTS}/")
"""`.parts/global/<stage>/`: the persisted map side of each global stage (global_parts), which
the manifest does not list (a cache: `pretrain data clean` removes it)."""
SCRATCH = "scratch"

__all__ = ["MapStagesWorker", "StageSpec", "build_stage"]


def fragment_path(out: OutPath, shard: str) -> OutPath:
    return out / PARTS / f"{shard}.json"


def read_stats_path(out: OutPath, stem: str) -> OutPath:
    return out / PARTS / f"{stem}.read.json"


def read_files(
    batch: pa.Table, *, out: str, skip: dict[str, list[int]], options: dict[str, Any]
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
        pieces_out: str | None = None,
        cost_out: str | None = None,
        batch_rows: int | None = None,
        map_spec: StageSpec | None = None,
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


PROGRESS = "progress"


def phase_path(out: OutPath) -> OutPath:
    """The phase the run is in (data_pipeline.throughput.RunClock.marker)."""
    return out / PARTS / PROGRESS / "phase.json"


def records_to_read(
    out: OutPath, stems: list[str], skip: dict[str, set[int]], shard_rows: int
) -> int | None:
    """Rows this run tags: the records of the inputs being read less those of their parts an
    earlier run finished (`skip`), once every input has been read (else None)."""
    total = 0
    for stem in stems:
        path = read_stats_path(out, stem)
        if not path.is_file():
            return None
        records = int(load_json(path).get("records", 0))
        done = skip.get(stem, set())
        total += records - sum(min(shard_rows, records - p * shard_rows) for p in done)
    return total


def pieces_dir(out: OutPath, shard: str) -> OutPath:
    return out / PARTS / PIECES / shard


def write_pieces(batch: pa.Table, out: str) -> pa.Table:
    """Write the rows of each shard present in `batch` as one piece; return {shard, rows}."""
    return write_mapped_pieces(batch, out, None)


def write_mapped_pieces(batch: pa.Table, out: str, mapped: Any) -> pa.Table:
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
        write_atomic(target / f"{name}.parquet", sink.getvalue().to_pybytes())
        shards.append(shard)
        counts.append(piece.num_rows)
    return pa.table({"shard": pa.array(shards, pa.string()), "rows": pa.array(counts, pa.int64())})


def read_pieces(out: OutPath, shard: str) -> pa.Table:
    """All rows of one shard in row order, each row once (retries may have written some twice)."""
    paths = listed(pieces_dir(out, shard), "*.parquet")
    table = pa.concat_tables([read_parquet(p) for p in paths]).sort_by("_row")
    rows = table.column("_row").to_numpy()
    if len(rows) > 1 and (rows[1:] == rows[:-1]).any():
        keep = [True, *(rows[1:] != rows[:-1]).tolist()]
        table = table.filter(pa.array(keep, pa.bool_()))
    return table


def scratch_dir(out: OutPath) -> OutPath:
    """Where shard and reject files are written before they are renamed into place; cleared at
    the start of every run, so a killed writer never leaves a temporary file beside shards."""
    return out / PARTS / SCRATCH


def write_parquet(
    table: pa.Table, out: OutPath, relative: str, level: int, compression: str = "zstd"
) -> dict[str, Any]:
    """Write `out/relative` through the scratch directory; returns its {bytes, sha256, rows}."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        compression_level=level,
        row_group_size=max(1, min(table.num_rows, 2048)),
    )
    data = sink.getvalue().to_pybytes()
    record = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": table.num_rows,
    }
    if isinstance(out, ObjectPath):  # one PUT: visible whole or not at all
        write_atomic(out / relative, data)
        return record
    scratch = out / PARTS / SCRATCH  # scratch_dir(out), for a local `out`
    scratch.mkdir(parents=True, exist_ok=True)
    temporary = scratch / f"{relative.replace('/', '__')}.{os.getpid()}.{threading.get_ident()}"
    with open(temporary, "wb") as handle:  # mode 0666 & ~umask, like any file the user writes
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, out / relative)
    return record


def _sample_rejects(rejects: pa.Table, reasons: list[str], per_reason: int) -> pa.Table:
    seen: dict[str, int] = {}
    keep = []
    for reason in reasons:
        seen[reason] = seen.get(reason, 0) + 1
        keep.append(seen[reason] <= per_reason)
    return rejects.filter(pa.array(keep, pa.bool_()))


class ShardWriter:
    """Turns the pieces of one shard into the shard: select, write shard and rejects, record."""

    def __init__(
        self,
        out: str,
        stages: Sequence[str],
        fields: Sequence[pa.Field],
        drop: Sequence[str],
        rejects_mode: str,
        sample_per_reason: int,
        level: int,
    ) -> None:
        self.out, self.stages, self.drop = output_path(out), list(stages), list(drop)
        self.fields = list(fields)
        """The stages' columns, in order (what the shards hold after the base columns)."""
        self.rejects_mode, self.sample_per_reason, self.level = (
            rejects_mode,
            sample_per_reason,
            level,
        )

    def __call__(self, shard: str) -> pa.Table:
        if not listed(pieces_dir(self.out, shard), "*.parquet"):
            return self.finished(shard)
        group = read_pieces(self.out, shard)
        keep, frag = ledger.fragment(group, self.stages, self.drop)
        kept = conform(group.filter(keep), self.fields)
        files = {}
        if kept.num_rows:
            name = layout.data_file(shard)
            files[name] = write_parquet(kept, self.out, name, self.level)
        files.update(self._write_rejects(group.filter(pc.invert(keep)), shard))
        write_json(fragment_path(self.out, shard), {"shard": shard, "files": files, **frag})
        return pa.table(
            {"shard": [shard], "kept": [kept.num_rows], "dropped": [group.num_rows - kept.num_rows]}
        )

    def finished(self, shard: str) -> pa.Table:
        """What the merge of `shard` returned, when it already ran to the end: Ray runs a task
        again when its node died before Ray heard back, and by then its pieces are gone."""
        path = fragment_path(self.out, shard)
        if not path.is_file() or not part_verifies(self.out, path):
            raise PretrainError(
                f"shard {shard}: its pieces are gone and it was not written; re-run the command "
                "(finished shards are reused)"
            )
        record = load_json(path)
        kept = int(record["files"].get(layout.data_file(shard), {}).get("rows", 0))
        return pa.table(
            {"shard": [shard], "kept": [kept], "dropped": [int(record["documents"]) - kept]}
        )

    def _write_rejects(self, rejects: pa.Table, shard: str) -> dict[str, Any]:
        if self.rejects_mode == "none" or not rejects.num_rows:
            return {}
        _, verdicts = ledger.attribute(rejects, self.stages, self.drop)
        reasons = [f"{stage}:{reason}" for stage, reason, _ in verdicts]
        table = conform(rejects, self.fields).append_column(
            "reject_reason", pa.array(reasons, pa.string())
        )
        if self.rejects_mode == "sample":
            table = _sample_rejects(table, reasons, self.sample_per_reason)
        name = layout.rejects_file(shard)
        return {name: write_parquet(table, self.out, name, self.level)}


def merge_shards(batch: pa.Table, **options: Any) -> pa.Table:
    """map_batches function: each row names a shard whose pieces become the shard (ShardWriter)."""
    writer = ShardWriter(**options)
    tables = []
    for shard in batch.column("shard").to_pylist():
        again = not listed(pieces_dir(writer.out, shard), "*.parquet")  # a retry, sealed before
        start = time.process_time()
        tables.append(writer(shard))
        if not again:
            throughput.seal_part(writer.out, shard, time.process_time() - start)
    for shard in batch.column("shard").to_pylist():
        remove_tree(pieces_dir(writer.out, shard))
    return pa.concat_tables(tables)


def finished_parts(out: OutPath) -> dict[str, set[int]]:
    """Stem -> part numbers whose shard, rejects and ledger fragment an earlier run finished and
    that still verify (every file the fragment records has its bytes and sha256). A part that
    does not verify is forgotten (its files deleted) and computed again."""
    done: dict[str, set[int]] = {}
    parts_dir = out / PARTS
    if not parts_dir.is_dir():
        return done
    for path in listed(parts_dir, "*.json"):
        stem, sep, part = path.stem.rpartition("-")
        if not sep or not part.isdigit() or path.name.endswith(".read.json"):
            continue
        if part_verifies(out, path):
            done.setdefault(stem, set()).add(int(part))
        else:
            forget_part(out, path.stem)
    return done


def part_verifies(out: OutPath, fragment: OutPath) -> bool:
    """True when the part's fragment is readable and every file it records is intact, and no
    shard or rejects file it does not record is present."""
    try:
        files = load_json(fragment)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for name in (layout.data_file(fragment.stem), layout.rejects_file(fragment.stem)):
        if (out / name).exists() and name not in files:
            return False
    for name, record in files.items():
        path = out / name
        if not path.is_file() or path.stat().st_size != record["bytes"]:
            return False
        if sha256_of(path) != record["sha256"]:  # re-hashed when the file was touched
            return False
    return True


def forget_part(out: OutPath, shard: str) -> None:
    """Delete everything one part wrote (shard, rejects, ledger fragment, pieces)."""
    for name in (layout.data_file(shard), layout.rejects_file(shard), f"{PARTS}/{shard}.json"):
        (out / name).unlink(missing_ok=True)
    remove_tree(pieces_dir(out, shard))


def forget_input(out: OutPath, stem: str) -> None:
    """Delete every part of input `stem` and its read record (its file changed or left)."""
    pattern = re.compile(re.escape(stem) + r"-\d{5}")
    for sub in (layout.DATA_DIR, layout.REJECTS_DIR, PARTS, f"{PARTS}/{PIECES}"):
        folder = out / sub
        for path in folder.glob("*") if folder.is_dir() else ():
            name = layout.shard_name(path.name).removesuffix(".json")
            if pattern.fullmatch(name):
                forget_part(out, name)
    for stage_dir in listed(out / PARTS / GLOBAL, "*"):  # persisted global-stage map output
        for path in listed(stage_dir, "*") if stage_dir.is_dir() else ():
            if pattern.fullmatch(path.name.split(".", 1)[0]):
                path.unlink(missing_ok=True)
    read_stats_path(out, stem).unlink(missing_ok=True)


def load_json(path: OutPath) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def file_done(out: OutPath, stem: str, done: dict[str, set[int]]) -> bool:
    """True when every part of input `stem` was written by an earlier run."""
    path = read_stats_path(out, stem)
    if not path.is_file():
        return False
    parts = load_json(path)["parts"]
    return set(range(parts)) <= done.get(stem, set())


def ensure_dirs(out: OutPath) -> None:
    for sub in (layout.DATA_DIR, layout.REJECTS_DIR, PARTS):
        (out / sub).mkdir(parents=True, exist_ok=True)
    remove_tree(scratch_dir(out))  # a killed writer's temporary files
