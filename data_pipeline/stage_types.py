"""The types a stage and the engines behind it (data_pipeline.dedup, ...) share: a stage's config and
manifest section bases, its appended columns, a global stage's map output. Below both the stage
contract (data_pipeline.stages.base) and the engines, so that neither imports the other for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pretrain.config import StrictModel


class StageConfig(StrictModel):
    """Base of each stage's config (in the pipeline YAML under `stages.<name>`)."""

    enabled: bool = True


class StageSection(StrictModel):
    """Base of a stage's section of the shards manifest (`Stage.Section`): the typed fields the
    stage records there as `sections.<stage name>` (pretrain.artifacts.shards). The
    defaults are what a reader gets from a manifest where the stage did not run."""


def append_columns(
    batch: pa.Table, fields: Sequence[pa.Field], columns: dict[str, Any]
) -> pa.Table:
    """Append a stage's columns (name -> list/array) in the order and types of its `fields`."""
    for schema_field in fields:
        values = columns[schema_field.name]
        array = (
            values
            if isinstance(values, pa.Array | pa.ChunkedArray)
            else pa.array(values, type=schema_field.type)
        )
        batch = batch.append_column(schema_field, array.cast(schema_field.type))
    return batch


@dataclass(frozen=True)
class MapOutput:
    """One input part's persisted map output, as `aggregate` sees it."""

    part: str
    """`<input stem>-<part:05d>`; parts reach `aggregate` sorted by this name."""
    rows: str = ""
    """Path of the part's rows as the stage received them (Parquet), when persisted."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Table name (as `map_part` returned it) -> path of its Parquet file."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """The counts `map_part` returned with its tables."""


AGGREGATE_SCRATCH = "exchange"
"""Folder beside a global stage's persisted map side (the parent of `MapOutput.rows`) where its
`aggregate` may leave files its joins read (dedup's file-based exchange); the runner removes it
once every join has finished, and an aggregate starts by removing what an earlier run left."""
