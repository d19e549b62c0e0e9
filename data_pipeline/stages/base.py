"""The stage contract. A map stage tags one Arrow batch at a time and keeps every row; a global
stage needs the whole corpus and is written as three parts the runner schedules:

    map_part(rows)        per input part, in a worker: tables the runner persists beside the part
    aggregate(parts)      in the driver, over every part's persisted map output (Ray tasks inside)
    join_part(rows, ...)  per input part, in a worker: the rows with the stage's columns appended

A stage also declares what the runner must know about it, so the runner names no stage: the
model artifacts it reads (`models()`, fingerprinted for resume and recorded in the manifest) and
what it adds to the shards manifest (`manifest_extra()`). A stage travels to Ray workers one way:
as its `spec()` (name, config, context), rebuilt there by `build_stage` (once per process).

The same stage object runs in-process in tests (`stage.setup(); stage(table)`); a new stage is one
entry in STAGE_REGISTRY plus its columns in pretrain.schema.STAGE_COLUMNS (the shards' contract,
which the packages reading shards share).
"""

from __future__ import annotations

import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from data_pipeline.stagekit import MapOutput, StageConfig, append_columns
from pretrain.schema import stage_fields

__all__ = ["STAGE_REGISTRY", "GlobalStage", "MapOutput", "Stage", "StageConfig", "StageSpec"]

StageSpec = tuple[str, dict[str, Any], dict[str, Any]]
"""(stage name, its config as JSON-able dict, context kwargs): how a stage travels to workers."""


class Stage(ABC):
    """A versioned map stage: appends the typed columns registered for `name` in pretrain.schema."""

    name: ClassVar[str]
    version: ClassVar[int] = 1
    """Bump when the output changes for the same input."""
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    Config: ClassVar[type[StageConfig]] = StageConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        self.config = config if config is not None else self.Config()
        self.context = context  # e.g. model artifact paths given by a caller

    @property
    def provides(self) -> tuple[str, ...]:
        return tuple(f.name for f in stage_fields(self.name))

    def spec(self) -> StageSpec:
        """What a worker needs to rebuild this stage (`build_stage`)."""
        return self.name, self.config.model_dump(mode="json"), dict(self.context)

    def setup(self) -> None:
        """Load heavy state (models, word lists) once per worker. Default: nothing."""

    def check(self) -> None:
        """Verify, without loading them, what `setup()` needs (model artifacts): the runner calls
        this before any work, and so does `--dry-run`. Default: nothing."""

    def models(self) -> dict[str, Path]:
        """The model artifacts (directories with a manifest.json) or model files this stage reads,
        by name (`model`, `models.en`, ...). A resumed job must see the same bytes; the manifest
        records their hashes as `<stage>.<name>`. Default: none."""
        return {}

    def manifest_extra(self) -> dict[str, Any]:
        """Keys this stage adds at the top level of the shards manifest. Default: none."""
        return {}

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
        return append_columns(batch, self.name, columns)


class GlobalStage(Stage):
    """A stage that needs the whole corpus: map_part -> aggregate -> join_part (module docstring).

    `apply(dataset)` runs it on a Ray Dataset without persisting anything (tests, notebooks);
    `apply_table(table)` runs the same logic in-process on one table. All give the same tags."""

    join_reads: ClassVar[tuple[str, ...]] = ()
    """The tables of `map_part` that `join_part` reads back (the others only feed `aggregate`)."""

    @abstractmethod
    def map_part(self, rows: pa.Table) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """Per part, in a worker: (named tables, counts). The runner persists both per part and
        reuses them on a re-run while they verify, so this must depend on `rows` alone."""

    @abstractmethod
    def aggregate(self, parts: Sequence[MapOutput]) -> list[tuple[Any, ...]]:
        """In the driver, over every part's map output (in part order): the extra arguments of
        each part's `join_part` (values or Ray object refs, resolved before the call)."""

    @abstractmethod
    def join_part(
        self, rows: pa.Table, outputs: dict[str, pa.Table], index: int, *args: Any
    ) -> pa.Table:
        """Per part, in a worker: `rows` (part number `index` in part order) with this stage's
        columns appended, from its map `outputs` and what `aggregate` gave this part."""

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
"""Stage name -> class, in pipeline order (the order of pretrain.schema.STAGE_COLUMNS). The
pipeline config's `stages` sections and the select's clause names are derived from it."""

REQUIRED_STAGES: dict[str, str] = {
    "extract": "it turns raw records into text for every other stage"
}
"""Stages every job runs (a config without them is refused, with this reason)."""

MANIFEST_DEFAULTS: dict[str, Any] = {"ppl_cutoffs": {}}
"""Top-level keys every shards manifest carries, whichever stages ran (a stage's
`manifest_extra()` overrides its own)."""


def stage_class(name: str) -> type[Stage]:
    module_name, _, class_name = STAGE_REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


_BUILT: dict[str, Stage] = {}
"""Stages rebuilt from specs in this process (so a worker sets each up once)."""


def build_stage(spec: StageSpec, *, cached: bool = False) -> Stage:
    """The stage a spec describes (its config validated by the stage's own Config). `cached`
    returns the same object for the same spec within a process (its `setup()` state is kept)."""
    key = json.dumps(spec, sort_keys=True, default=str)
    if cached and key in _BUILT:
        return _BUILT[key]
    name, config, context = spec
    cls = stage_class(name)
    stage = cls(cls.Config.model_validate(config), **context)
    if cached:
        _BUILT[key] = stage
    return stage
