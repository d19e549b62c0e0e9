"""The dedup global stage: exact + MinHash near-duplicate clusters, one document kept per cluster.

In the runner: `map_part` (signatures, band keys, exact keys of one input part; persisted per part
so a re-run hashes only the parts not yet hashed) -> `aggregate` (the distributed shuffle over
every part: band buckets, verification, star components, the kept document per cluster) ->
`join_part` (the tags joined back to the part's rows). `apply(dataset)` runs the same distributed
steps on a Ray Dataset's blocks, `apply_table(table)` the in-process version; all give the same
tags for the same documents.
Tags: `exact_hash` (hex of the normalised text), `dup_cluster` (smallest vertex of the cluster;
a singleton's own vertex), `dup_keep`, `dup_cluster_size`. Rows are never dropped here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DEDUP_COLUMNS, DedupConfig
from data_pipeline.dedup.core import DedupStats, dedup_table
from data_pipeline.stages.base import GlobalStage, MapOutput, StageConfig


class DedupStage(GlobalStage):
    """Exact and near-duplicate tagging (see data_pipeline.dedup)."""

    name: ClassVar[str] = "dedup"
    order: ClassVar[int] = 80
    columns: ClassVar[tuple[pa.Field, ...]] = DEDUP_COLUMNS
    tags: ClassVar[tuple[str, ...]] = ("dup_keep",)
    version: ClassVar[int] = 1
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    Config: ClassVar[type[StageConfig]] = DedupConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        super().__init__(config, **context)
        self.stats = DedupStats()
        """Counts of the last apply / apply_table call (documents, empty, tiny, clusters, ...)."""
        self._kept: list[str] = []
        """Tag folders `apply` left under `exchange_dir` for Ray's rebuilds (close)."""
        self._cost_keys: list[str] = []
        """Keys under which the lazy join back records its reads' costs (attach_cost)."""

    @property
    def dedup_config(self) -> DedupConfig:
        assert isinstance(self.config, DedupConfig)
        return self.config

    def apply_table(self, table: pa.Table) -> pa.Table:
        """Tag one in-memory table (tests, tiny inputs); saves / queries the index if configured."""
        from data_pipeline.dedup import index

        config = self.dedup_config
        columns, self.stats = dedup_table(table, config)
        if config.index.against:
            columns = index.mark_against(config.index.against, table, columns, config, self.stats)
        if config.index.save_to:
            index.save_index(config.index.save_to, [table], config)
        return self.append(table, columns)

    def apply(self, dataset: Any) -> Any:
        """Tag a Ray Dataset with the distributed shuffle (band buckets, star components). The
        aggregate runs here; the returned dataset is lazy: each slice's tags are joined back
        when the consumer reads it (data_pipeline.dedup.lazyattach), in the input's order, so
        the input and the whole tagged output are never in the object store together. It
        holds the input blocks until it is dropped. With `index.save_to` the tagged blocks are
        computed here (the index is saved from them); then a handed-over input (`stage.apply(
        read())`) has each block freed as its tagged blocks appear.
        Context `exchange_dir` (a folder all workers share): the aggregate's pieces go through
        files there instead of the object store (dedup_dataset); the tags' files stay there
        until `close()`: reading the returned dataset (or Ray rebuilding a lost block) reads
        them."""
        from data_pipeline.dedup.distributed import dedup_dataset

        given = [dataset]
        del dataset  # dedup_dataset takes the only reference this frame had
        exchange_dir = self.context.get("exchange_dir")
        result, self.stats = dedup_dataset(
            given, self.dedup_config, self, self._budget(), exchange_dir
        )
        if "exchange_tags" in self.stats.extra:
            self._kept.append(self.stats.extra["exchange_tags"])
        if "attach_cost_key" in self.stats.extra:
            self._cost_keys.append(self.stats.extra["attach_cost_key"])
        return result

    def attach_cost(self) -> dict[str, float]:
        """CPU-seconds and peak RSS of the lazy join back of the datasets `apply` returned, as
        far as they have been read (it runs in Ray Data's read tasks after `apply` returns, so
        `cost` cannot hold it), and the reads counted; with `cost` it is the stage's CPU."""
        from data_pipeline.dedup.lazyattach import attach_cost

        return attach_cost(self._cost_keys)

    def close(self) -> None:
        """Remove the tags' files `apply` kept under `exchange_dir` (data_pipeline.dedup.
        distributed.release_tags): call it once the tagged dataset is written or no longer
        used, since reading it (it is lazy) or rebuilding a lost block reads them, and forget the
        join back's recorded costs (attach_cost). Without a call both go at the interpreter's
        exit."""
        from data_pipeline.dedup.distributed import release_tags
        from data_pipeline.dedup.lazyattach import forget_costs

        release_tags(self._kept)
        forget_costs(self._cost_keys)
        self._kept, self._cost_keys = [], []

    def _budget(self) -> int:
        return int(self.context.get("worker_memory_mb", DEFAULT_WORKER_MEMORY_MB))

    def models(self) -> dict[str, Path]:
        against = self.dedup_config.index.against
        return {"index.against": Path(against)} if against else {}

    def map_part(self, rows: pa.Table) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        from data_pipeline.dedup.tasks import map_tables

        bands, exact, docs, info = map_tables(rows, self.dedup_config)
        return {"bands": bands, "exact": exact, "docs": docs}, info

    def maps_in_stream(self) -> bool:
        # querying an index reads its partitions on every call: map each part once, whole
        return not self.dedup_config.index.against

    def combine_maps(
        self, pieces: Sequence[tuple[dict[str, pa.Table], dict[str, Any]]]
    ) -> tuple[dict[str, pa.Table], dict[str, Any]] | None:
        from data_pipeline.dedup.tasks import combine_maps

        return combine_maps(pieces)

    def aggregate(self, parts: Sequence[MapOutput]) -> list[tuple[Any, ...]]:
        from data_pipeline.dedup.distributed import dedup_parts

        joins, self.stats = dedup_parts(parts, self.dedup_config, self, self._budget())
        return joins

    def join_part(
        self, rows: pa.Table, outputs: dict[str, pa.Table], index: int, *args: Any
    ) -> pa.Table:
        from data_pipeline.dedup.tasks import attach

        return attach(rows, index, 0, rows.num_rows, *args)

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        bands, rows = self.dedup_config.band_rows
        described["lsh"] = {"bands": bands, "rows": rows}
        described["stats"] = self.stats.as_dict()
        return described


def summary(table: pa.Table) -> dict[str, int]:
    """Documents, kept, and in clusters of size > 1, from a tagged table."""
    keep = np.asarray(table.column("dup_keep"), dtype=bool)
    size = np.asarray(table.column("dup_cluster_size"))
    return {"documents": len(table), "kept": int(keep.sum()), "in_clusters": int((size > 1).sum())}
