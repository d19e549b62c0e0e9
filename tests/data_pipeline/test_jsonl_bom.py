"""A JSON Lines file saved with a UTF-8 byte order mark (Windows tools write one; `cat` of such
files puts one at the start of each file's first line): the line after the mark is a document,
not a malformed_json reject (before, the first document of every such file was dropped)."""

from __future__ import annotations

import codecs
from pathlib import Path

import pyarrow as pa

from data_pipeline.readers import InputFile, detect_format, read_file


def _read(path: Path) -> list[dict]:
    fmt, stem = detect_format(str(path))
    options = {"shard_rows": 100, "batch_rows": 10, "eval_fraction": 0.0}
    tables = read_file(InputFile(str(path), fmt, stem), max_input_bytes=1 << 20, **options)
    return pa.concat_tables(list(tables)).to_pylist()


def test_a_byte_order_mark_does_not_drop_the_line_it_starts(tmp_path: Path) -> None:
    bom = codecs.BOM_UTF8
    lines = [
        bom + b'{"id": "first", "text": "the first document of the first file"}',
        b'{"id": "second", "text": "an ordinary line"}',
        bom + b'{"id": "third", "text": "the first line of a second file, concatenated"}',
        b'{"id": "bad", "text": "the mark is only skipped at a line start"}' + bom,
    ]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\r\n".join(lines) + b"\n")
    rows = {row["id"]: row for row in _read(path)}
    assert rows["bom/first"]["text"] == "the first document of the first file"
    assert rows["bom/second"]["_read_reason"] is None
    assert rows["bom/third"]["text"] == "the first line of a second file, concatenated"
    assert rows["bom/bom.jsonl:4"]["_read_reason"] == "malformed_json"  # a mark mid-line
    assert all(rows[f"bom/{i}"]["_read_reason"] is None for i in ("first", "second", "third"))
