"""The dedup global stage: exact + MinHash near-duplicate clusters, one document kept per cluster.

`apply(dataset)` runs the distributed version on Ray (data_pipeline.dedup.distributed);
`apply_table(table)` the in-process one. Both give the same tags for the same documents.
Tags: `exact_hash` (hex of the normalised text), `dup_cluster` (smallest vertex of the cluster;
a singleton's own vertex), `dup_keep`, `dup_cluster_size`. Rows are never dropped here.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from data_pipeline.config import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats, dedup_table
from data_pipeline.stages.base import GlobalStage, StageConfig


class DedupStage(GlobalStage):
    """Exact and near-duplicate tagging (see data_pipeline.dedup)."""

    name: ClassVar[str] = "dedup"
    version: ClassVar[int] = 1
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    Config: ClassVar[type[StageConfig]] = DedupConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        super().__init__(config, **context)
        self.stats = DedupStats()
        """Counts of the last apply / apply_table call (documents, empty, tiny, clusters, ...)."""

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
        """Tag a Ray Dataset with the distributed shuffle (band buckets, star components)."""
        from data_pipeline.dedup.distributed import dedup_dataset

        budget = self.context.get("worker_memory_mb", DEFAULT_WORKER_MEMORY_MB)
        result, self.stats = dedup_dataset(dataset, self.dedup_config, self, budget)
        return result

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
