"""Reading tagged shard artifacts (`pretrain data run` output, kind `shards`).

Columns of later pipeline stages may be absent (stages disabled): readers take the columns that
exist and fill the rest with nulls of the schema's type.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pretrain.errors import ArtifactError
from pretrain.manifest import listed_path, manifest_sha256, require
from pretrain.schema import BASE_FIELDS, STAGE_COLUMNS

SHARDS_KIND = "shards"
_ALL_FIELDS: dict[str, pa.Field] = {f.name: f for f in BASE_FIELDS}
for _fields in STAGE_COLUMNS.values():
    _ALL_FIELDS.update({f.name: f for f in _fields})


def require_shards(directory: str | Path, deep: bool = True) -> tuple[dict[str, Any], list[Path]]:
    """Verify a shards artifact and list its Parquet shards (sorted); refuse when it has none."""
    root = Path(directory)
    manifest = require(root, kind=SHARDS_KIND, deep=deep)
    shards = sorted(
        listed_path(root, manifest, rel)
        for rel in manifest["files"]
        if rel.startswith("shards/") and rel.endswith(".parquet")
    )
    if not shards:
        raise ArtifactError(
            f"{root} lists no shards/*.parquet files; re-run `pretrain data run` "
            "or pass the right directory"
        )
    return manifest, shards


def shards_identity(directory: str | Path) -> str:
    return manifest_sha256(directory)


def read_columns(path: Path, columns: Sequence[str], batch_size: int = 2048) -> Iterator[pa.Table]:
    """Stream `path` in batches holding exactly `columns` (absent ones as typed nulls)."""
    parquet = pq.ParquetFile(path)
    present = [c for c in columns if c in parquet.schema_arrow.names]
    for batch in parquet.iter_batches(batch_size=batch_size, columns=present):
        table = pa.Table.from_batches([batch])
        yield _fill_missing(table, columns)
    if parquet.metadata.num_rows == 0:
        return


def _fill_missing(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    arrays = []
    fields = []
    for name in columns:
        field = _ALL_FIELDS.get(name, pa.field(name, pa.string()))
        if name in table.column_names:
            arrays.append(table.column(name))
            fields.append(table.schema.field(name))
        else:
            arrays.append(pa.nulls(table.num_rows, type=field.type))
            fields.append(field.with_nullable(True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def unit_hash(doc_id: str, seed: int) -> float:
    """A stable number in [0, 1) from a document id and a seed (sampling decisions)."""
    digest = hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def tag(value: Any) -> str:
    """A tag value as a group key (`unknown` where the tag does not exist yet)."""
    return "unknown" if value is None or value == "" else str(value)
