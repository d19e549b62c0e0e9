"""The `meta` column as an Arrow type (schema 3): typed {key, str, int, float, bool, json} entries
sorted by key, nested objects as dotted keys; a list of structs, since HF datasets and polars have
no map type and Parquet no union. The safety stage declares its own nested columns."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

META_SLOTS: tuple[str, ...] = ("str", "int", "float", "bool", "json")
"""The value slots of a `meta` entry, one set per entry."""
META_ENTRY = pa.struct(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("str", pa.string()),
        pa.field("int", pa.int64()),
        pa.field("float", pa.float64()),
        pa.field("bool", pa.bool_()),
        pa.field("json", pa.string()),
    ]
)
META_TYPE = pa.list_(pa.field("entry", META_ENTRY, nullable=False))
_INT64 = range(-(2**63), 2**63)


def _slot(value: Any, clean: Callable[[str], str]) -> tuple[str, Any] | None:
    """The slot and value one leaf is stored in (None: JSON null); text passes `clean`."""
    if value is None:
        return None
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "bool", value
    if isinstance(value, int) and value in _INT64:
        return "int", value
    if isinstance(value, float):
        return "float", value
    if isinstance(value, str):
        return "str", clean(value)
    if isinstance(value, bytes):  # a Parquet binary cell
        return "str", value.decode("utf-8", "replace")
    if isinstance(value, int | list | tuple | Mapping):  # a big integer, a list, an empty object
        return "json", clean(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
    isoformat = getattr(value, "isoformat", None)  # Parquet dates and timestamps
    return "str", clean(isoformat() if callable(isoformat) else str(value))


def _leaves(meta: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every leaf, in the record's order; a non-empty object is a path."""
    stack: list[tuple[str, Any]] = [(str(key), meta[key]) for key in reversed(list(meta))]
    while stack:
        key, value = stack.pop()
        if isinstance(value, Mapping) and value:
            stack.extend((f"{key}.{inner}", value[inner]) for inner in reversed(list(value)))
        else:
            yield key, value


def meta_entries(
    meta: Mapping[str, Any] | None, clean: Callable[[str], str] = str
) -> list[dict[str, Any]] | None:
    """The `meta` column value of one record (None for no or an empty object); every key and
    text passes `clean` (the reader's: text Arrow can store). Two paths that spell one key
    (`{"a.b": 1, "a": {"b": 2}}`, or keys alike once cleaned): the first in the record is kept."""
    if not meta:
        return None
    entries: dict[str, dict[str, Any]] = {}
    for path, value in _leaves(meta):
        if (key := clean(path)) not in entries:
            entry: dict[str, Any] = dict.fromkeys(META_SLOTS)
            if (slot := _slot(value, clean)) is not None:
                entry[slot[0]] = slot[1]
            entries[key] = {"key": key, **entry}
    return [entries[key] for key in sorted(entries)]


def meta_value(entry: Mapping[str, Any]) -> Any:
    """The value one `meta` entry holds (a `json` slot's as its JSON text; None: JSON null)."""
    return next((entry[slot] for slot in META_SLOTS if entry[slot] is not None), None)
