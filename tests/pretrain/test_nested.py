"""Nested tags as Arrow types (the one document schema)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline.stages.registry import schema_for
from data_pipeline.stages.safety import CATEGORIES_TYPE, PII_COUNTS_TYPE, pii_struct
from pretrain.artifacts.shards import read_columns
from pretrain.nested import META_SLOTS, META_TYPE, meta_entries, meta_value
from pretrain.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY

STAGES = ("extract", "safety")
RECORDS = [
    {
        "meta": {"lang": "en", "n": 3, "nested": {"a": [1, 2]}, "ok": True, "名": "中文"},
        "pii": {"email": 2, "phone": 1},
        "categories": ["profanity", "sexual"],
    },
    {"meta": None, "pii": {}, "categories": []},
    {"meta": {}, "pii": None, "categories": None},
]


def _table() -> pa.Table:
    """The documents as the schema holds them."""
    schema = schema_for(STAGES)
    rows = []
    for i, record in enumerate(RECORDS):
        row = {name: None for name in schema.names}
        row.update(id=f"d{i}", text=f"document {i}", split="train")
        row["meta"] = meta_entries(record["meta"])
        row["pii_counts"] = None if record["pii"] is None else pii_struct(record["pii"])
        row["unsafe_categories"] = record["categories"]
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def test_schema_types_are_nested() -> None:
    schema = schema_for(STAGES)
    assert schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
    assert schema.field("meta").type == META_TYPE
    assert schema.field("pii_counts").type == PII_COUNTS_TYPE
    assert schema.field("unsafe_categories").type == CATEGORIES_TYPE
    row = _table().to_pylist()[0]
    assert [(e["key"], meta_value(e)) for e in row["meta"]] == [
        ("lang", "en"),
        ("n", 3),
        ("nested.a", "[1, 2]"),
        ("ok", True),
        ("名", "中文"),
    ]
    assert row["meta"][1] == {"key": "n", **dict.fromkeys(META_SLOTS), "int": 3}
    assert row["pii_counts"]["email"] == 2 and row["pii_counts"]["card"] == 0


def test_a_shard_reads_back_the_nested_values(tmp_path: Path) -> None:
    path = tmp_path / "shard.parquet"
    pq.write_table(_table(), path)
    read = pa.concat_tables(read_columns(path, schema_for(STAGES).names))
    assert read.schema.field("pii_counts").type == PII_COUNTS_TYPE
    assert read.to_pylist() == _table().to_pylist()
    assert read.column("unsafe_categories").to_pylist() == [["profanity", "sexual"], [], None]


def test_a_key_two_paths_spell_keeps_the_first_and_cleaned_keys_collide_alike() -> None:
    def clean(text: str) -> str:
        return text.encode("utf-8", "replace").decode("utf-8")

    record = json.loads('{"a.b": 1, "a": {"b": 2}, "k\\udc80": "x", "k\\udc81": "y"}')
    entries = meta_entries(record, clean)
    assert [(e["key"], meta_value(e)) for e in entries or ()] == [("a.b", 1), ("k?", "x")]
    assert meta_entries({"empty": {}}) == [
        {"key": "empty", **dict.fromkeys(META_SLOTS), "json": "{}"}
    ]
