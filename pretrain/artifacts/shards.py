"""`shards` (`pretrain data run`): the typed reader of the layout `pretrain.shards_layout` defines;
`read_columns` fills a column a disabled stage did not write with typed nulls (the fields its
caller passes: this layer names no stage's tag)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from pretrain import shards_layout as layout
from pretrain.artifacts import base
from pretrain.errors import ArtifactError
from pretrain.schema import BASE_FIELDS

KIND = "shards"

_BASE: dict[str, pa.Field] = {f.name: f for f in BASE_FIELDS}


def is_shard(rel: str) -> bool:
    """A data shard of a shards artifact (what readers read; not rejects or the ledger)."""
    return rel in layout.kept_files([rel])


class ShardsFields(base.Fields):
    """What a shards manifest records beyond the common fields."""

    KIND: ClassVar[str] = KIND
    stages: list[dict[str, Any]] = Field(default_factory=list)
    """Each stage's `Stage.describe()` (name, version, config)."""
    models: dict[str, str] = Field(default_factory=dict)
    """Model artifacts the stages used: {stage.key: artifact manifest sha256}."""
    sections: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Stage name -> its section: what the stage's `manifest_section()` returned, as JSON; its
    types are the stage's `Section` model's, checked when written and when read."""
    throughput: dict[str, Any] | None = None
    """Per-stage costs of the run that wrote it (data_pipeline.throughput)."""


class Shards(base.Artifact[ShardsFields]):
    """A verified shards artifact; `open` refuses one that lists no shards."""

    def check(self) -> None:
        if self.shard_paths:
            return
        counts, root = self.manifest.counts, self.directory
        if counts.get("documents_kept") == 0:  # a finished run that kept nothing: re-running
            raise ArtifactError(  # it gives the same
                f"{root} holds no documents: its data run kept 0 of {counts.get('documents_in')} "
                "(ledger.json says why); run `pretrain data run` on inputs with text, or pass "
                "the right directory"
            )
        raise ArtifactError(
            f"{root} lists no {layout.DATA_GLOB} files; re-run `pretrain data run` "
            "or pass the right directory"
        )

    def section_record(self, stage: str) -> dict[str, Any]:
        """Stage `stage`'s section as written (untyped: the stage's `Section` types it); empty
        when the stage recorded nothing."""
        return dict(self.fields.sections.get(stage, {}))

    @cached_property
    def shard_paths(self) -> list[Path]:
        """The Parquet shards the manifest lists (never a file merely present), sorted."""
        return [self.path(rel) for rel in layout.kept_files(self.raw["files"])]


open = Shards.open


def read_columns(
    path: Path, columns: Sequence[str], batch_size: int = 2048, fields: Iterable[pa.Field] = ()
) -> Iterator[pa.Table]:
    """Stream shard `path` in batches holding exactly `columns`. An absent one (its stage did not
    run) is typed nulls: a base column's type, else its type among `fields` (the stages' tags),
    else string."""
    parquet = pq.ParquetFile(path)
    present = [c for c in columns if c in parquet.schema_arrow.names]
    known = {**{f.name: f for f in fields}, **_BASE}
    for batch in parquet.iter_batches(batch_size=batch_size, columns=present):
        table = pa.Table.from_batches([batch]).replace_schema_metadata()
        for name in columns:
            if name not in table.column_names:
                field = known.get(name, pa.field(name, pa.string())).with_nullable(True)
                table = table.append_column(field, pa.nulls(table.num_rows, field.type))
        yield table.select(list(columns))
