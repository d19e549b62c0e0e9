"""What runs in the data job's Ray workers: the reader, the map-stage actor, the row files and
the merge of each part's row files into its shard. A row file
(`.parts/rows/<part>/<first>-<last>.<sha256>.parquet`) is named by its rows and its bytes' sha256,
so name and bytes land in one rename and a changed one is an error naming it, never rows. Every
output is deterministic: a task retried, or a job re-run after its driver died, writes the same
bytes."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline import ledger, throughput
from data_pipeline.formats import InputFile
from data_pipeline.parts import (
    GLOBAL_DIGEST,
    part_record_path,
    part_verifies,
    read_stats_path,
    rows_dir,
    write_parquet,
)
from data_pipeline.readers import read_unit
from data_pipeline.stages.base import StageSpec, build_stage
from data_pipeline.timelimit import cpu_time
from pretrain import shards_layout as layout
from pretrain.errors import PretrainError
from pretrain.schema import conform
from pretrain.storage import (
    OutPath,
    json_bytes,
    listed,
    output_path,
    remove_tree,
    write_atomic,
    write_json,
)

__all__ = ["MapStagesWorker", "StageSpec", "build_stage"]


def read_files(
    batch: pa.Table, *, out: str | OutPath, skip: frozenset[str], options: dict[str, Any]
) -> Iterator[pa.Table]:
    """Map function: each input row names one unit of work; stream its raw records in batches,
    then write its read record (totals, parts, each file's counts: what resume checks)."""
    for item in batch.to_pylist():
        files = [InputFile(f["path"], f["format"], f["stem"]) for f in item["files"]]
        stem = item["stem"]
        counts: list[dict[str, Any]] = []
        batches = read_unit(files, stem, skip_parts=skip, stats=counts, **options)
        yield from throughput.timed_read(out, batches)
        totals = {key: sum(c[key] for c in counts) for key in ("records", "bytes", "id_collisions")}
        parts = -(-totals["records"] // options["shard_rows"])
        record = {**totals, "parts": parts, "inputs": counts}
        write_json(read_stats_path(output_path(out), stem), record)


class MapStagesWorker:
    """A Ray Data actor: builds and sets up the map stages once, then runs them in order over each
    block the reader produced (at most `ray.block_mb`; the pool deals blocks, not bundles, so no
    actor is left with a long last task), in slices of `batch_rows` rows. It writes row files and
    returns only their row counts: tagged text never travels back through the object store."""

    def __init__(self, specs: Sequence[StageSpec], out: str | OutPath, batch_rows: int) -> None:
        self.refused: PretrainError | None = None
        self.out, self.batch_rows = out, batch_rows
        try:
            self.stages = [build_stage(spec) for spec in specs]
            throughput.record_setup(out, self.stages)
        except PretrainError as exc:
            # Raised here, Ray reports an actor that died in its creation task (its traceback as
            # text, the error lost): raised by the first call, it reaches the user as one line.
            # An actor given no block is never called: the driver reads it (raise_refusal).
            self.refused = exc
            target = throughput.cost_dir(output_path(out)) / REFUSED
            target.mkdir(parents=True, exist_ok=True)
            name = f"{socket.gethostname()}-{os.getpid()}-{id(exc)}.txt"
            write_atomic(target / name, str(exc).encode())

    def __call__(self, block: pa.Table) -> pa.Table:
        if self.refused is not None:
            raise self.refused
        rows = block.num_rows
        outputs, spent = [], dict[str, float]()
        for start in range(0, max(rows, 1), self.batch_rows):
            tagged = block.slice(start, self.batch_rows)
            for stage in self.stages:  # the stages' own code, in order
                begin = cpu_time()
                tagged = stage(tagged)
                spent[stage.name] = spent.get(stage.name, 0.0) + cpu_time() - begin
            outputs.append(write_rows(tagged, self.out))
        throughput.record_batch(self.out, "map", block, spent)
        return pa.concat_tables(outputs, promote_options="default")


REFUSED = ".refused"
"""Under the run's cost folder (cleared at each run's start): one record per map actor whose
stages refused in its constructor."""


def raise_refusal(out: OutPath) -> None:
    """Raise (one line) the refusal a map actor recorded in its constructor, if one did: an
    actor given no block (no documents to read) never raised it itself, and the run would have
    ended as a success with a stage that could not be set up."""
    folder = throughput.cost_dir(out) / REFUSED
    found = listed(folder, "*.txt") if folder.is_dir() else []
    if found:
        raise PretrainError(found[0].read_text(encoding="utf-8"))


def write_rows(batch: pa.Table, out: str | OutPath) -> pa.Table:
    """Write the rows of each part present in `batch` as one row file; return {shard, rows}."""
    shards, counts = [], []
    for shard in sorted(set(batch.column("_shard").to_pylist())):
        part_rows = batch.filter(pc.equal(batch.column("_shard"), shard))
        rows = part_rows.column("_row")
        first, last = pc.min(rows).as_py(), pc.max(rows).as_py()
        name = f"{first:012d}-{last:012d}"
        target = rows_dir(output_path(out), shard)
        target.mkdir(parents=True, exist_ok=True)
        sink = pa.BufferOutputStream()
        pq.write_table(part_rows, sink, compression="lz4")
        data = sink.getvalue().to_pybytes()
        write_atomic(target / f"{name}.{hashlib.sha256(data).hexdigest()}.parquet", data)
        shards.append(shard)
        counts.append(part_rows.num_rows)
    return pa.table({"shard": pa.array(shards, pa.string()), "rows": pa.array(counts, pa.int64())})


def _read_row_file(path: OutPath) -> pa.Table:
    """The rows of one row file, once its bytes have the sha256 its name records."""
    name = path.name.removesuffix(".parquet")
    rows, _, recorded = name.partition(".")
    data = path.read_bytes()
    if len(recorded) != 64 or hashlib.sha256(data).hexdigest() != recorded:
        raise PretrainError(
            f"row file {path} does not have the sha256 its name records (changed after it was "
            "written: a disk error or a second writer); re-run the command (row files are made again)"
        )
    return pq.read_table(pa.BufferReader(data))


def read_rows(out: OutPath, shard: str) -> pa.Table:
    """All rows of one shard in row order, each row once (retries may have written some twice);
    a row file whose bytes changed since it was written is an error (`_read_row_file`)."""
    paths = listed(rows_dir(out, shard), "*.parquet")
    table = pa.concat_tables([_read_row_file(p) for p in paths]).sort_by("_row")
    rows = table.column("_row").to_numpy()
    if len(rows) > 1 and (rows[1:] == rows[:-1]).any():
        keep = [True, *(rows[1:] != rows[:-1]).tolist()]
        table = table.filter(pa.array(keep, pa.bool_()))
    return table


# --- the merge: one task per part, after the stream and the global stages ---------------------


def merge_parts(batch: pa.Table, **options: Any) -> pa.Table:
    """map_batches function: each row names a shard whose row files become the shard (`_merge`:
    select, shard, rejects, part record); it returns the shard's part record, as written, and its
    stages' costs (ledger.Merged). The part record holds `global_digest` (runner.Published)."""
    target = output_path(options.pop("out"))
    digest = options.pop("global_digest", "")
    recorded = {GLOBAL_DIGEST: digest} if digest else {}
    shards = batch.column("shard").to_pylist()
    records, costs = [], []
    for shard in shards:
        if listed(rows_dir(target, shard), "*.parquet"):
            start = time.process_time()
            record = _merge(target, shard, recorded, **options)
            counts = json.loads(record)
            write = {"cpu_s": time.process_time() - start, "docs": counts["documents"]}
            write["bytes"] = counts["bytes"]
            records.append(record.decode())
            costs.append(throughput.fold_part(target, shard, write).decode())
            continue
        # Merged before (Ray runs a task again when its node died before Ray heard back, and by
        # then its row files are gone): its records as the run that finished it wrote them.
        path = part_record_path(target, shard)
        if not path.is_file() or not part_verifies(target, path):
            raise PretrainError(
                f"shard {shard}: its row files are gone and it was not written; re-run the command "
                "(finished shards are reused)"
            )
        records.append(path.read_text(encoding="utf-8"))
        costs.append("")
    for shard in shards:
        remove_tree(rows_dir(target, shard))
    return pa.table(
        {"shard": shards, "record": records, "cost": costs},
        schema=pa.schema([("shard", pa.string()), ("record", pa.string()), ("cost", pa.string())]),
    )


def _merge(
    out: OutPath,
    shard: str,
    recorded: dict[str, str],
    *,
    stages: Sequence[str],
    fields: Sequence[pa.Field],
    drop: Sequence[str],
    rejects_mode: str,
    sample_per_reason: int,
    level: int,
) -> bytes:
    """Write one shard and its rejects from its row files, then its part record (returned).
    `fields` are the stages' columns in order (what the shards hold after the base columns)."""
    group = read_rows(out, shard)
    keep, counts, verdicts = ledger.part_counts(group, stages, drop)
    kept = conform(group.filter(keep), fields)
    files = {}
    if kept.num_rows:
        files[layout.data_file(shard)] = write_parquet(kept, out, layout.data_file(shard), level)
    rejects = group.filter(pc.invert(keep))
    if rejects_mode != "none" and rejects.num_rows:
        reasons = [f"{stage}:{reason}" for stage, reason, dropped in verdicts if dropped]
        table = conform(rejects, fields).append_column(
            "reject_reason", pa.array(reasons, pa.string())
        )
        if rejects_mode == "sample":  # the first `sample_per_reason` of each reason
            seen: dict[str, int] = {}
            sample = []
            for reason in reasons:
                seen[reason] = seen.get(reason, 0) + 1
                sample.append(seen[reason] <= sample_per_reason)
            table = table.filter(pa.array(sample, pa.bool_()))
        name = layout.rejects_file(shard)
        files[name] = write_parquet(table, out, name, level)
    data = json_bytes({"shard": shard, "files": files, **counts, **recorded})
    write_atomic(part_record_path(out, shard), data)
    return data
