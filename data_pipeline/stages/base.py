"""The stage contract (pretrain/CONTRACTS.md, "Stage contract"). A map stage tags one Arrow batch
at a time and keeps every row; a global stage needs the whole corpus and is three parts the runner
schedules:

    map_part(rows)        per input part, in a worker: tables the runner persists beside the part
    aggregate(parts)      in the driver, over every part's persisted map output (Ray tasks inside)
    join_part(rows, ...)  per input part, in a worker: the rows with the stage's columns appended

The same stage object runs in-process in tests (`stage.setup(); stage(table)`).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from data_pipeline.stage_types import MapOutput, StageConfig, StageSection, append_columns
from pretrain.errors import ConfigError

__all__ = [
    "GlobalStage",
    "MapOutput",
    "Stage",
    "StageConfig",
    "StageSection",
    "StageSpec",
    "build_stage",
]

StageSpec = tuple[str, str, dict[str, Any], dict[str, Any]]
"""(stage name, `module:Class`, its config as a JSON-able dict, context kwargs): how a stage
travels to workers, which import that one module (no registry discovery there)."""


class Stage(ABC):
    """A versioned map stage: appends its typed `columns` to every batch, keeps every row."""

    name: ClassVar[str]
    """Set in the class body of every registered stage (config section, columns' owner)."""
    order: ClassVar[int]
    """Place in the pipeline (stages run by increasing order; two stages may not share one)."""
    columns: ClassVar[tuple[pa.Field, ...]] = ()
    """The columns this stage appends, in order (a `<name>_reason` one, null = passes, when it
    can reject)."""
    tags: ClassVar[tuple[str, ...]] = ()
    """Those of `columns` the packages downstream read by name: the shards' contract with them.
    Declared here only: the encoder carries each into every document's sidecar, mixtures select
    on them, shard readers give typed nulls where the stage did not run (registry.tag_fields)."""
    version: ClassVar[int] = 1
    """Bump when the output changes for the same input."""
    Config: ClassVar[type[StageConfig]] = StageConfig
    """The stage's config model; a stage also annotates `config: ItsConfig` (what __init__ sets)."""
    required: ClassVar[str] = ""
    """Non-empty: every job must run this stage, and this says why (a config without it is
    refused with this reason)."""
    Section: ClassVar[type[StageSection]] = StageSection
    """The typed fields this stage records in the shards manifest, as `sections.<name>`
    (`manifest_section()` fills them; a reader of a manifest where the stage did not run gets
    the defaults: data_pipeline.stages.registry.section)."""

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        self.config = config if config is not None else self.Config()
        self.context = context  # e.g. model artifact paths given by a caller

    def spec(self) -> StageSpec:
        """What a worker needs to rebuild this stage (`build_stage`)."""
        target = f"{type(self).__module__}:{type(self).__qualname__}"
        return self.name, target, self.config.model_dump(mode="json"), dict(self.context)

    def __reduce__(self) -> tuple[Any, tuple[StageSpec]]:
        """Pickled (Ray ships objects by pickle) as its spec: rebuilt, not copied, so state
        loaded by `setup()` stays behind and the config is validated again where it lands."""
        return build_stage, (self.spec(),)

    def setup(self) -> None:
        """Load heavy state (models, word lists) once per worker. Default: nothing."""

    def check(self) -> None:
        """Verify, without loading them, what `setup()` needs (model artifacts): the runner calls
        this before any work, and so does `--dry-run`. Default: nothing."""

    def models(self) -> dict[str, Path]:
        """The model artifacts (directories with a manifest.json) or model files this stage reads,
        by name (`model`, `index.against`, ...). A resumed job must see the same bytes; the manifest
        records their hashes as `<stage>.<name>`. Default: none."""
        return {}

    def manifest_section(self) -> StageSection | None:
        """This run's section of the shards manifest (a `Section`), read after the stage ran (in
        the driver: what `aggregate` learnt). Default: None, nothing recorded."""
        return None

    def record_limit(self) -> int | None:
        """Bytes past which this stage rejects a raw record unparsed: the readers then read past
        such a record without holding it (a compression bomb costs no memory). Default: none."""
        return None

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

    @staticmethod
    def column_or_nulls(batch: pa.Table, name: str) -> list[Any]:
        """Column `name` as a list; nulls when an earlier stage that adds it did not run."""
        if name in batch.column_names:
            return batch.column(name).to_pylist()
        return [None] * batch.num_rows

    def append(self, batch: pa.Table, columns: dict[str, Any]) -> pa.Table:
        """Append `columns` (name -> list/array) in the schema's order and types."""
        return append_columns(batch, self.columns, columns)


class GlobalStage(Stage):
    """A stage that needs the whole corpus: map_part -> aggregate -> join_part (module docstring)."""

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
    """CPU-seconds (`cpu_s`) and worker `peak_rss_mb` of the last `aggregate`,
    measured inside its workers (data_pipeline.throughput); None when the stage does not measure
    itself."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        raise TypeError(f"{self.name} is a global stage: map_part -> aggregate -> join_part")


def build_stage(spec: StageSpec) -> Stage:
    """The stage a spec describes (its config validated by the stage's own Config)."""
    name, target, config, context = spec
    module, _, qualname = target.partition(":")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(cls, type) and issubclass(cls, Stage) and cls.name == name):
        raise ConfigError(f"stage spec {name!r}: {target} is not that stage's class")
    return cls(cls.Config.model_validate(config), **context)
