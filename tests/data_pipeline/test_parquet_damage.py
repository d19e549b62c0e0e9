"""A Parquet file with one bad part keeps the rest. A string cell that is not UTF-8 (Spark and
other writers do not check) is one `undecodable` record, and a damaged page one
`truncated_input` row for the rest of its row group; reading goes on. Before, either made the
rest of the file one `truncated_input` row: its good records lost, and the ledger counted one
record for all of them."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.data_pipeline.readall import read_all


def _strings(values: list[bytes]) -> pa.Array:
    """A string array holding `values` unchecked, as a writer that does not validate holds them."""
    offsets = [0]
    for value in values:
        offsets.append(offsets[-1] + len(value))
    buffers = [None, pa.array(offsets, pa.int32()).buffers()[1], pa.py_buffer(b"".join(values))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def _rows(path: Path) -> tuple[list[tuple[str, str | None, str | None]], dict]:
    table, stats = read_all(path, max_input_bytes=10_000)
    ids = [i.removeprefix("x/") for i in table.column("id").to_pylist()]
    return list(
        zip(ids, table.column("text").to_pylist(), table.column("_read_reason").to_pylist())
    ), stats


def test_a_string_cell_that_is_not_utf8_is_one_reject(tmp_path: Path) -> None:
    texts = [b"first page", b"bad \xff\xfe bytes", b"third page", b"fourth page"]
    table = pa.table({"id": ["a", "b", "c", "d"], "text": _strings(texts)})
    pq.write_table(table, tmp_path / "x.parquet")
    rows, stats = _rows(tmp_path / "x.parquet")
    assert rows == [
        ("a", "first page", None),
        ("x.parquet:2", None, "undecodable"),
        ("c", "third page", None),
        ("d", "fourth page", None),
    ]
    assert stats["records"] == 4


def test_a_damaged_page_loses_only_the_rest_of_its_row_group(tmp_path: Path) -> None:
    table = pa.table({"id": [f"r{i}" for i in range(30)], "text": [f"page {i}" for i in range(30)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=10, compression="none")
    data = bytearray(sink.getvalue())
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(1)
    at = chunk.data_page_offset
    data[at : at + 12] = b"\xff" * 12  # the page header of row group 1's text column
    (tmp_path / "x.parquet").write_bytes(bytes(data))
    rows, _ = _rows(tmp_path / "x.parquet")
    kept = [i for i, _, reason in rows if reason is None]
    assert kept == [f"r{i}" for i in [*range(10), *range(20, 30)]]
    assert [(i, reason) for i, _, reason in rows if reason] == [
        ("x.parquet:11+", "truncated_input")
    ]
