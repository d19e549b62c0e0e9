"""The dedup global stage: exact + MinHash near-duplicate clusters, one document kept per cluster.

`map_part` (signatures, band and exact keys of one part; persisted, so a re-run hashes only new
parts) -> `aggregate` (data_pipeline.dedup.aggregate) -> `join_part` (tags back by row). Columns:
data_pipeline.dedup.config.DEDUP_COLUMNS; rows are never dropped here. `index.against` is an
input of the run: `check()` verifies it before any work and `models()` names it for the lineage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DEDUP_COLUMNS, DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.stages.base import GlobalStage, MapOutput, StageConfig


class DedupStage(GlobalStage):
    """Exact and near-duplicate tagging (see data_pipeline.dedup)."""

    name: ClassVar[str] = "dedup"
    order: ClassVar[int] = 80
    columns: ClassVar[tuple[pa.Field, ...]] = DEDUP_COLUMNS
    tags: ClassVar[tuple[str, ...]] = ("dup_keep",)
    version: ClassVar[int] = 2
    Config: ClassVar[type[StageConfig]] = DedupConfig
    config: DedupConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        super().__init__(config, **context)
        self.stats = DedupStats()
        """Counts of the last aggregate (documents, empty, tiny, clusters, ...)."""

    def models(self) -> dict[str, Path]:
        against = self.config.index.against
        return {"index.against": Path(against)} if against else {}

    def check(self) -> None:
        against = self.config.index.against
        if against:
            from data_pipeline.dedup.index import index_config

            index_config(against, like=self.config)

    def map_part(self, rows: pa.Table) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        from data_pipeline.dedup.tasks import map_tables

        bands, exact, docs, info = map_tables(rows, self.config)
        return {"bands": bands, "exact": exact, "docs": docs}, info

    def aggregate(self, parts: Sequence[MapOutput]) -> list[tuple[Any, ...]]:
        from data_pipeline.dedup.aggregate import dedup_parts

        budget = int(self.context.get("worker_memory_mb", DEFAULT_WORKER_MEMORY_MB))
        joins, self.stats = dedup_parts(parts, self.config, self, budget)
        return joins

    def join_part(
        self, rows: pa.Table, outputs: dict[str, pa.Table], index: int, *args: Any
    ) -> pa.Table:
        from data_pipeline.dedup.tasks import attach

        return attach(rows, index, *args)

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        bands, rows = self.config.band_rows
        described["lsh"] = {"bands": bands, "rows": rows}
        described["stats"] = self.stats.as_dict()
        return described
