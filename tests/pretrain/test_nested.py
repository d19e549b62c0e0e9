"""Nested tags as Arrow types (schema 2) and the reader of schema 1's JSON strings: a shard written
before the bump reads as exactly the same values as the same documents written after it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline.stages.registry import schema_for
from pretrain.artifacts.shards import read_columns
from pretrain.nested import (
    CATEGORIES_TYPE,
    META_TYPE,
    PII_COUNTS_TYPE,
    meta_entries,
    pii_struct,
    schema_version,
)
from pretrain.schema import SCHEMA_VERSION

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


def _table(version: int) -> pa.Table:
    """The same documents as schema `version` wrote them (1: the strings the old code wrote)."""
    schema = schema_for(STAGES)
    rows = []
    for i, record in enumerate(RECORDS):
        row = {name: None for name in schema.names}
        row.update(id=f"d{i}", text=f"document {i}", split="train")
        if version == 1:
            meta = record["meta"]
            row["meta"] = json.dumps(meta, ensure_ascii=False, sort_keys=True) if meta else None
            pii = record["pii"]
            row["pii_counts"] = None if pii is None else json.dumps(pii, sort_keys=True)
            cats = record["categories"]
            row["unsafe_categories"] = None if cats is None else ",".join(cats)
        else:
            row["meta"] = meta_entries(record["meta"])
            row["pii_counts"] = None if record["pii"] is None else pii_struct(record["pii"])
            row["unsafe_categories"] = record["categories"]
        rows.append(row)
    if version == 2:
        return pa.Table.from_pylist(rows, schema=schema)
    strings = {"meta", "pii_counts", "unsafe_categories"}
    old = pa.schema(
        [pa.field(f.name, pa.string()) if f.name in strings else f for f in schema],
        metadata={b"pretrain.schema_version": b"1"},
    )
    return pa.Table.from_pylist(rows, schema=old)


def test_schema_2_types_are_nested() -> None:
    schema = schema_for(STAGES)
    assert SCHEMA_VERSION == 2 and schema_version(schema) == 2
    assert schema.field("meta").type == META_TYPE
    assert schema.field("pii_counts").type == PII_COUNTS_TYPE
    assert schema.field("unsafe_categories").type == CATEGORIES_TYPE
    row = _table(2).to_pylist()[0]
    assert {"key": "n", "value": "3"} in row["meta"] and {"key": "lang", "value": "en"} in row[
        "meta"
    ]
    assert row["pii_counts"]["email"] == 2 and row["pii_counts"]["card"] == 0


def test_a_schema_1_shard_reads_identically(tmp_path: Path) -> None:
    old, new = tmp_path / "v1.parquet", tmp_path / "v2.parquet"
    pq.write_table(_table(1), old)
    pq.write_table(_table(2), new)
    assert schema_version(pq.ParquetFile(old).schema_arrow) == 1
    assert pq.read_table(old).column("meta").type == pa.string()  # what the file holds
    columns = schema_for(STAGES).names
    read_old = pa.concat_tables(read_columns(old, columns))
    read_new = pa.concat_tables(read_columns(new, columns))
    assert read_old.schema.field("pii_counts").type == PII_COUNTS_TYPE
    assert read_old.to_pylist() == read_new.to_pylist()
    assert read_old.column("unsafe_categories").to_pylist() == [["profanity", "sexual"], [], None]
