"""The stage contract. A map stage tags one Arrow batch at a time and keeps every row; a global
stage needs the whole corpus (map -> distributed aggregate -> join back) and works on a Ray Dataset.

The same stage object runs in-process in tests (`stage.setup(); stage(table)`) and inside Ray Data's
`map_batches` (the runner wraps it in an actor class that calls `setup()` once per worker).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pyarrow as pa

from pretrain.config import StrictModel
from pretrain.schema import stage_fields


class StageConfig(StrictModel):
    """Base of each stage's config (in the pipeline YAML under `stages.<name>`)."""

    enabled: bool = True


class Stage(ABC):
    """A versioned map stage: appends the typed columns registered for `name` in pretrain.schema."""

    name: ClassVar[str]
    version: ClassVar[int] = 1
    """Bump when the output changes for the same input."""
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    Config: ClassVar[type[StageConfig]] = StageConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        self.config = config if config is not None else self.Config()
        self.context = context  # e.g. model artifact paths resolved by the runner

    @property
    def provides(self) -> tuple[str, ...]:
        return tuple(f.name for f in stage_fields(self.name))

    def setup(self) -> None:
        """Load heavy state (models, word lists) once per worker. Default: nothing."""

    def check(self) -> None:
        """Verify, without loading them, what `setup()` needs (model artifacts): the runner calls
        this before any work, and so does `--dry-run`. Default: nothing."""

    @abstractmethod
    def __call__(self, batch: pa.Table) -> pa.Table:
        """Return `batch` with this stage's columns appended (same rows, same order)."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this stage."""
        return {
            "name": self.name,
            "version": self.version,
            "config": self.config.model_dump(mode="json"),
        }

    def append(self, batch: pa.Table, columns: dict[str, Any]) -> pa.Table:
        """Append `columns` (name -> list/array) in the schema's order and types."""
        for field in stage_fields(self.name):
            values = columns[field.name]
            array = (
                values
                if isinstance(values, pa.Array | pa.ChunkedArray)
                else pa.array(values, type=field.type)
            )
            batch = batch.append_column(field, array.cast(field.type))
        return batch


class GlobalStage(Stage):
    """A stage that needs the whole corpus. The runner calls `apply(dataset)` on a Ray Dataset;
    `apply_table(table)` runs the same logic in-process on one table (tests, tiny inputs)."""

    cost: dict[str, float] | None = None
    """CPU-seconds (`cpu_s`) and worker `peak_rss_mb` of the last `apply`, measured inside its
    workers (data_pipeline.throughput); None when the stage does not measure itself."""

    @abstractmethod
    def apply(self, dataset: Any) -> Any:
        """ray.data.Dataset -> ray.data.Dataset with this stage's columns added to every row."""

    @abstractmethod
    def apply_table(self, table: pa.Table) -> pa.Table:
        """In-process equivalent of `apply` for one table."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.apply_table(batch)


STAGE_REGISTRY: dict[str, str] = {
    "extract": "data_pipeline.stages.extract:ExtractStage",
    "langid": "data_pipeline.stages.langid:LangIdStage",
    "domain": "data_pipeline.stages.classify:DomainStage",
    "quality": "data_pipeline.stages.classify:QualityStage",
    "rules": "data_pipeline.stages.rules:RulesStage",
    "safety": "data_pipeline.stages.safety:SafetyStage",
    "perplexity": "data_pipeline.stages.perplexity:PerplexityStage",
    "dedup": "data_pipeline.stages.dedup:DedupStage",
}
"""Stage name -> class, in pipeline order (the order of pretrain.schema.STAGE_COLUMNS)."""


def stage_class(name: str) -> type[Stage]:
    module_name, _, class_name = STAGE_REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
