"""A JSON Lines file saved with a UTF-8 byte order mark (Windows tools write one; `cat` of such
files puts one at the start of each file's first line): the line after the mark is a document,
not a malformed_json reject (before, the first document of every such file was dropped)."""

from __future__ import annotations

import codecs
from pathlib import Path

from tests.data_pipeline.readall import read_all


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
    table, _ = read_all(path, max_input_bytes=1 << 20)
    rows = {row["id"]: row for row in table.to_pylist()}
    assert rows["bom/first"]["text"] == "the first document of the first file"
    assert rows["bom/second"]["_read_reason"] is None
    assert rows["bom/third"]["text"] == "the first line of a second file, concatenated"
    assert rows["bom/bom.jsonl:4"]["_read_reason"] == "malformed_json"  # a mark mid-line
    assert all(rows[f"bom/{i}"]["_read_reason"] is None for i in ("first", "second", "third"))
