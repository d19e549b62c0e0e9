"""Nested tags as Arrow types (schema version 2), and the reader of version 1's JSON strings.

- `meta`: the input record's pass-through object as a list of `{key, value}` entries sorted by
  key (the physical layout of an Arrow map; Hugging Face datasets has no map type, duckdb's
  `map_from_entries(meta)` makes one). A string value is stored as is, any other value as its
  JSON text (`3`, `true`, `{"a": 1}`).
- `pii_counts`: a struct with one int32 per PII kind (0 = none found; null = kind not checked).
- `unsafe_categories`: a list of category names (empty = none).

Version 1 stored these as a JSON object string, a JSON object string and a comma-separated
string. `upgrade(table)` turns a version 1 table's columns into version 2's, so a shard written
before the bump reads exactly as the same documents written after it.
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
NESTED_COLUMNS = {
    "meta": META_TYPE,
    "pii_counts": PII_COUNTS_TYPE,
    "unsafe_categories": CATEGORIES_TYPE,
}
SCHEMA_VERSION_KEY = b"pretrain.schema_version"


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


def schema_version(schema: pa.Schema) -> int:
    """The document schema version a table or file was written with (1 when unrecorded)."""
    raw = (schema.metadata or {}).get(SCHEMA_VERSION_KEY, b"1")
    return int(raw.decode())


def _meta_from_json(value: str | None) -> list[dict[str, str]] | None:
    return None if value is None else meta_entries(json.loads(value))


def _pii_from_json(value: str | None) -> dict[str, Any] | None:
    return None if value is None else pii_struct(json.loads(value))


def _categories_from_text(value: str | None) -> list[str] | None:
    return None if value is None else [c for c in value.split(",") if c]


_FROM_V1 = {
    "meta": _meta_from_json,
    "pii_counts": _pii_from_json,
    "unsafe_categories": _categories_from_text,
}


def upgrade(table: pa.Table, version: int) -> pa.Table:
    """A table read from a file of schema `version` with version 2's nested columns."""
    if version >= 2:
        return table
    for name, convert in _FROM_V1.items():
        if name in table.column_names and pa.types.is_string(table.schema.field(name).type):
            index = table.column_names.index(name)
            values = [convert(v) for v in table.column(name).to_pylist()]
            field = pa.field(name, NESTED_COLUMNS[name])
            table = table.set_column(index, field, pa.array(values, NESTED_COLUMNS[name]))
    return table
