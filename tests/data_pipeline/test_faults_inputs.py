"""Bad inputs at the reader: each becomes a reason-coded row or a one-line error naming the file."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.inputs import plan_inputs
from data_pipeline.readers import Fields, InputFile, detect_format, read_file
from pretrain.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"


def _read(path: Path, **kwargs) -> tuple[pa.Table, dict]:
    fmt, stem = detect_format(str(path))
    stats: dict = {}
    tables = list(
        read_file(
            InputFile(str(path), fmt, stem),
            shard_rows=4,
            batch_rows=3,
            eval_fraction=0.005,
            stats=stats,
            **kwargs,
        )
    )
    return pa.concat_tables(tables), stats


def test_fixture_records_become_rows_with_reasons() -> None:
    table, stats = _read(DATA / "docs.jsonl")
    reasons = dict(
        zip(table.column("id").to_pylist(), table.column("_read_reason").to_pylist(), strict=True)
    )
    assert stats["records"] == table.num_rows == 13
    assert reasons["docs/docs.jsonl:9"] == "malformed_json"
    assert reasons["docs/docs.jsonl:10"] == "undecodable"
    assert reasons["docs/no-text"] == "missing_text"
    assert reasons["docs/prose-00002"] is None  # the record's own id, namespaced by its input
    assert table.column("_shard").to_pylist()[:5] == ["docs-00000"] * 4 + ["docs-00001"]


def test_ids_and_splits_are_stable(tmp_path: Path) -> None:
    first, _ = _read(DATA / "pages.warc.gz")
    copy = tmp_path / "elsewhere" / "pages.warc.gz"
    copy.parent.mkdir()
    shutil.copy(DATA / "pages.warc.gz", copy)
    second, _ = _read(copy)
    assert first.column("id").equals(second.column("id"))
    assert first.column("split").equals(second.column("split"))
    assert all(i.startswith("pages/urn:uuid:") for i in first.column("id").to_pylist())


def test_truncated_gzip_keeps_what_was_read_and_records_the_rest(tmp_path: Path) -> None:
    data = gzip.compress((DATA / "docs.jsonl").read_bytes())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    table, stats = _read(path)
    reasons = table.column("_read_reason").to_pylist()
    assert reasons[-1] == "truncated_input" and stats["records"] == table.num_rows
    assert 1 <= reasons.count(None) < 12


def test_truncated_warc_record(tmp_path: Path) -> None:
    data = (DATA / "pages.warc.gz").read_bytes()
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(data[: int(len(data) * 0.6)])
    table, _ = _read(path)
    reasons = table.column("_read_reason").to_pylist()
    assert reasons[-1] == "truncated_record"
    assert reasons[:-1] and all(r is None for r in reasons[:-1])


def test_corrupt_gzip_bytes_mid_stream(tmp_path: Path) -> None:
    data = bytearray(gzip.compress((DATA / "docs.jsonl").read_bytes()))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(bytes(data))
    table, _ = _read(path)
    assert table.column("_read_reason").to_pylist()[-1] == "truncated_input"


def test_file_that_is_not_gzip_is_a_one_line_error_or_a_reject(tmp_path: Path) -> None:
    path = tmp_path / "fake.jsonl.gz"
    path.write_bytes(b'{"text": "plain, not gzip"}\n')
    with pytest.raises(InputError, match=r"fake.jsonl.gz.*not a gzip file"):
        _read(path)
    table, _ = _read(path, on_unreadable="reject")
    assert table.column("_read_reason").to_pylist() == ["unreadable_file"]


def test_parquet_missing_text_column(tmp_path: Path) -> None:
    path = tmp_path / "notext.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["hello"]}), path)
    with pytest.raises(InputError, match=r"notext.parquet.*no 'text' column.*body"):
        _read(path)
    table, _ = _read(path, on_unreadable="reject")
    assert table.column("_read_reason").to_pylist() == ["unreadable_file"]
    renamed, _ = _read(path, fields=Fields(text="body"))
    assert renamed.column("text").to_pylist() == ["hello"]


def test_parquet_rows_keep_extra_columns_as_meta() -> None:
    table, _ = _read(DATA / "code.parquet")
    assert {"key": "programming_language", "value": "python"} in table.column("meta")[0].as_py()


def test_input_planning(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        plan_inputs([str(tmp_path / "missing")])
    for name in ("a.jsonl", "b.warc.gz", "notes.txt"):
        shutil.copy(DATA / "docs.jsonl", tmp_path / name)
    files = plan_inputs([str(tmp_path)])
    assert [(f.stem, f.format) for f in files] == [("a", "jsonl"), ("b", "warc")]
    (tmp_path / "sub").mkdir()
    shutil.copy(DATA / "docs.jsonl", tmp_path / "sub" / "a.jsonl")
    with pytest.raises(InputError, match="both write shards named a-"):
        plan_inputs([str(tmp_path)])


def test_uris_go_through_pyarrow_filesystems(tmp_path: Path) -> None:
    shutil.copy(DATA / "docs.jsonl", tmp_path / "docs.jsonl")
    [item] = plan_inputs([f"file://{tmp_path}"])
    assert item.path == f"file://{tmp_path}/docs.jsonl" and item.stem == "docs"
    table, stats = _read_uri(item)
    assert stats["records"] == table.num_rows == 13
    with pytest.raises(InputError, match="nosuchscheme://x/y"):
        plan_inputs(["nosuchscheme://x/y"])


def _read_uri(item) -> tuple[pa.Table, dict]:
    stats: dict = {}
    tables = list(read_file(item, shard_rows=100, batch_rows=50, eval_fraction=0.005, stats=stats))
    return pa.concat_tables(tables), stats
