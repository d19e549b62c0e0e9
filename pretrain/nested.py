"""Nested tags as Arrow types (document schema version 2, the one schema).

- `meta`: the input record's pass-through object as a list of `{key, value}` entries sorted by
  key (the physical layout of an Arrow map; Hugging Face datasets has no map type, duckdb's
  `map_from_entries(meta)` makes one). A string value is stored as is, any other value as its
  JSON text (`3`, `true`, `{"a": 1}`).
- `pii_counts`: a struct with one int32 per PII kind (0 = none found; null = kind not checked).
- `unsafe_categories`: a list of category names (empty = none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

META_ENTRY = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())]
)
META_TYPE = pa.list_(pa.field("entry", META_ENTRY, nullable=False))
PII_KINDS: tuple[str, ...] = ("email", "cn_id", "card", "ipv6", "ipv4", "phone")
"""Every kind data_pipeline.stages.pii detects, in its priority order."""
PII_COUNTS_TYPE = pa.struct([pa.field(kind, pa.int32()) for kind in PII_KINDS])
CATEGORIES_TYPE = pa.list_(pa.field("category", pa.string(), nullable=False))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def meta_entries(meta: Mapping[str, Any] | None) -> list[dict[str, str]] | None:
    """The `meta` column value of one record (None for no or an empty object)."""
    if not meta:
        return None
    return [{"key": str(key), "value": _text(meta[key])} for key in sorted(meta, key=str)]


def pii_struct(counts: Mapping[str, int], checked: Iterable[str] = PII_KINDS) -> dict[str, Any]:
    """The `pii_counts` value: a count for every checked kind, null for the others."""
    wanted = set(checked)
    return {kind: int(counts.get(kind, 0)) if kind in wanted else None for kind in PII_KINDS}
