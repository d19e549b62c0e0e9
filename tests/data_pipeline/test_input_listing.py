"""Listing inputs: what a directory input reads and lists as skipped, locally and on s3://.

A `__pycache__` folder below an input (the embedded sample is a Python package, so importing it
writes one) holds bytecode Python wrote, never data: listing its files made the manifest's
`skipped_files` depend on whether the interpreter had imported the package. One file name in many
folders of an s3:// prefix is named `<folders>__<stem>` as it is locally (Dolma's layout)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa

from data_pipeline.inputs import plan_inputs
from data_pipeline.readers import read_unit
from tests.data_pipeline.s3tools import s3_env, s3_filesystem


def _doc(text: str) -> bytes:
    return gzip.compress(json.dumps({"text": text}).encode() + b"\n", mtime=0)


def test_a_pycache_folder_below_an_input_is_neither_read_nor_listed(tmp_path: Path) -> None:
    crawl = tmp_path / "sample"
    (crawl / "__pycache__").mkdir(parents=True)
    (crawl / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (crawl / "nested" / "__pycache__").mkdir(parents=True)
    (crawl / "nested" / "__pycache__" / "x.jsonl").write_text('{"text": "not data"}\n')
    (crawl / "web.json.gz").write_bytes(_doc("a page"))
    (crawl / "__init__.py").write_text("")
    skipped: list[dict[str, str]] = []
    files = plan_inputs([str(crawl)], skipped)
    assert [f.path for f in files] == [str(crawl / "web.json.gz")]
    assert [s["path"] for s in skipped] == [str(crawl / "__init__.py")]  # still accounted for


def test_one_file_name_in_many_s3_folders_gets_a_stem_per_folder(s3_server, monkeypatch) -> None:
    for name, value in s3_env(s3_server).items():
        monkeypatch.setenv(name, value)
    s3 = s3_filesystem(s3_server)
    s3.create_dir("dolma")
    layout = {
        "documents/cc/part-0000.json.gz": "from cc",
        "documents/books/part-0000.json.gz": "from books",
        "documents/cc/2023/part-0000.json.gz": "from cc 2023",
        "documents/part-0000.json.gz": "at the top",
    }
    for key, text in layout.items():
        with s3.open_output_stream(f"dolma/{key}", compression=None) as handle:
            handle.write(_doc(text))
    for entry in ("s3://dolma/documents", "s3://dolma/documents/"):
        files = plan_inputs([entry])
        assert {f.stem: f.path for f in files} == {
            "books__part-0000": "s3://dolma/documents/books/part-0000.json.gz",
            "cc__2023__part-0000": "s3://dolma/documents/cc/2023/part-0000.json.gz",
            "cc__part-0000": "s3://dolma/documents/cc/part-0000.json.gz",
            "part-0000": "s3://dolma/documents/part-0000.json.gz",
        }
    rows = {}
    for item in plan_inputs(["s3://dolma/documents"]):
        options = {"shard_rows": 10, "batch_rows": 10, "eval_fraction": 0.0}
        [row] = pa.concat_tables(list(read_unit((item,), item.stem, **options))).to_pylist()
        rows[row["id"].split("/")[0]] = row["text"]
    assert rows == {  # the ids are apart too, and each holds its own folder's text
        "books__part-0000": "from books",
        "cc__2023__part-0000": "from cc 2023",
        "cc__part-0000": "from cc",
        "part-0000": "at the top",
    }
