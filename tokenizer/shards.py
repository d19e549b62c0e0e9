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
from pretrain.manifest import (
    canonical_json,
    listed_path,
    load_manifest,
    manifest_sha256,
    require,
    sha256_bytes,
)
from pretrain.schema import BASE_FIELDS, STAGE_COLUMNS

SHARDS_KIND = "shards"
_ALL_FIELDS: dict[str, pa.Field] = {f.name: f for f in BASE_FIELDS}
for _fields in STAGE_COLUMNS.values():
    _ALL_FIELDS.update({f.name: f for f in _fields})


def _is_shard(rel: str) -> bool:
    """A data shard of a shards artifact (what readers read; not rejects or the ledger)."""
    return rel.startswith("shards/") and rel.endswith(".parquet")


def require_shards(directory: str | Path, deep: bool = True) -> tuple[dict[str, Any], list[Path]]:
    """Verify a shards artifact and list its Parquet shards (sorted); refuse when it has none."""
    root = Path(directory)
    manifest = require(root, kind=SHARDS_KIND, deep=deep)
    shards = sorted(listed_path(root, manifest, rel) for rel in manifest["files"] if _is_shard(rel))
    if not shards:
        raise ArtifactError(
            f"{root} lists no shards/*.parquet files; re-run `pretrain data run` "
            "or pass the right directory"
        )
    return manifest, shards


def shards_identity(directory: str | Path) -> str:
    """What a shards artifact holds: sha256 of the sorted {path: sha256} of its shards/*.parquet
    (the files readers read; `require` checks them against these hashes). Unlike the manifest's
    own sha256 it ignores created_unix, command, git state and the pipeline's ledger, rejects
    and progress files: the same documents rebuilt give the same identity, a changed byte in a
    shard another one."""
    files = load_manifest(directory)["files"]
    listed = {rel: files[rel]["sha256"] for rel in sorted(files) if _is_shard(rel)}
    return sha256_bytes(canonical_json({"kind": SHARDS_KIND, "shards": listed}))


def same_shards(lock_inputs: dict[str, Any], directory: str | Path) -> bool:
    """Whether `directory` holds the shards a tokenizer lock's `inputs` records (lock 3: content
    identity; locks 1-2 recorded the shards manifest's sha256)."""
    if "shards_content_sha256" in lock_inputs:
        return shards_identity(directory) == lock_inputs["shards_content_sha256"]
    return manifest_sha256(directory) == lock_inputs.get("shards_manifest_sha256")


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
