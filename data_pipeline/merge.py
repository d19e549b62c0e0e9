"""The merge: one task per shard turns the stream's pieces into the shard, its rejects and its
ledger fragment (select applied, rows in order, each once). A merge retried after its node died
finds its pieces gone and returns what the finished merge recorded. Each row it returns carries
the bytes of the part's fragment and cost record, which the driver folds instead of reading them
back (data_pipeline.collect)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline import ledger, throughput
from data_pipeline.parts import fragment_path, part_verifies, pieces_dir, write_parquet
from data_pipeline.workers import read_pieces
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
)


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
        out: str | OutPath,
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
        data = json_bytes({"shard": shard, "files": files, **frag})
        write_atomic(fragment_path(self.out, shard), data)
        return _row(shard, kept.num_rows, group.num_rows - kept.num_rows, data)

    def finished(self, shard: str) -> pa.Table:
        """What the merge of `shard` returned, when it already ran to the end: Ray runs a task
        again when its node died before Ray heard back, and by then its pieces are gone."""
        path = fragment_path(self.out, shard)
        if not path.is_file() or not part_verifies(self.out, path):
            raise PretrainError(
                f"shard {shard}: its pieces are gone and it was not written; re-run the command "
                "(finished shards are reused)"
            )
        data = path.read_bytes()
        record = json.loads(data)
        kept = int(record["files"].get(layout.data_file(shard), {}).get("rows", 0))
        return _row(shard, kept, int(record["documents"]) - kept, data)

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


def _row(shard: str, kept: int, dropped: int, fragment: bytes) -> pa.Table:
    return pa.table(
        {
            "shard": [shard],
            "kept": [kept],
            "dropped": [dropped],
            "fragment": [fragment.decode()],
            "cost": [""],
        }
    )


def _sealed(out: OutPath, shard: str) -> bytes:
    """The part's cost record (empty when there is none: the driver then has none either)."""
    try:
        return throughput.part_cost_path(out, shard).read_bytes()
    except FileNotFoundError:
        return b""


def merge_shards(batch: pa.Table, **options: Any) -> pa.Table:
    """map_batches function: each row names a shard whose pieces become the shard (ShardWriter);
    it returns the shard's fragment and cost record, as written (data_pipeline.collect)."""
    writer = ShardWriter(**options)
    tables = []
    for shard in batch.column("shard").to_pylist():
        again = not listed(pieces_dir(writer.out, shard), "*.parquet")  # a retry, sealed before
        start = time.process_time()
        table = writer(shard)
        if again:  # sealed by the run that finished it: its record as that run wrote it
            cost = _sealed(writer.out, shard)
        else:
            cost = throughput.seal_part(writer.out, shard, time.process_time() - start)
        table = table.set_column(4, "cost", pa.array([cost.decode()], pa.string()))
        tables.append(table)
    for shard in batch.column("shard").to_pylist():
        remove_tree(pieces_dir(writer.out, shard))
    return pa.concat_tables(tables)
