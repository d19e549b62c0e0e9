"""Shards (`pretrain.artifacts.shards`) as the tokenizer reads them: tag columns typed by the
stages' declarations, the content identity a lock records, and the sampling hash."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from data_pipeline.stages.registry import tag_fields
from pretrain.artifacts import base as base_artifact
from pretrain.artifacts import shards as shards_artifact
from pretrain.artifacts.shards import KIND as SHARDS_KIND
from pretrain.artifacts.shards import is_shard
from pretrain.manifest import canonical_json, sha256_bytes


def read_columns(path: Path, columns: Sequence[str], batch_size: int = 2048) -> Iterator[pa.Table]:
    """Shard `path` in batches holding exactly `columns`; a tag a shard lacks (its stage did not
    run) is nulls of the type its stage declares."""
    return shards_artifact.read_columns(path, columns, batch_size, tag_fields())


def require_shards(directory: str | Path) -> tuple[dict[str, Any], list[Path]]:
    """Verify a shards artifact and list its Parquet shards (sorted); refuse when it has none."""
    art = shards_artifact.open(directory)
    return art.raw, art.shard_paths


def shards_identity(directory: str | Path) -> str:
    """sha256 of the sorted {path: sha256} of a shards artifact's data/*.parquet: unlike the
    manifest's own sha256 it ignores created_unix, command, git state, ledger and rejects, so the
    same documents rebuilt give the same identity."""
    peeked = base_artifact.peek(directory)  # the manifest's seal checked
    files = peeked.files
    listed = {rel: files[rel].sha256 for rel in sorted(files) if is_shard(rel)}
    return sha256_bytes(canonical_json({"kind": SHARDS_KIND, "shards": listed}))


def unit_hash(doc_id: str, seed: int) -> float:
    """A stable number in [0, 1) from a document id and a seed (sampling decisions)."""
    digest = hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def tag(value: Any) -> str:
    """A tag value as a group key (`unknown` where the tag does not exist yet)."""
    return "unknown" if value is None or value == "" else str(value)
