"""Hostile inputs found by a new user's review: a file whose name is not valid UTF-8 (an old
Latin-1 crawl copied as is), and ARC records (or a WARC record whose header line is damaged,
which warcio then parses as ARC), to which warcio gives a fresh random `WARC-Record-ID` on every
read: the same input must give the same document ids on every run."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from data_pipeline.formats import InputFile, detect_format
from data_pipeline.inputs import plan_inputs
from data_pipeline.readers import read_unit
from pretrain.errors import InputError

HTTP = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"


def _arc_record(url: str, words: str) -> bytes:
    body = HTTP + f"<html><body><p>{words}</p></body></html>".encode()
    return f"{url} 10.0.0.1 20260101000000 text/html {len(body)}\n".encode() + body + b"\n"


def _warc_record(uri: str, words: str) -> bytes:
    http = HTTP + f"<p>{words}</p>".encode()
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{uri}>\r\nWARC-Target-URI: http://{uri}/\r\n"
        "WARC-Date: 2026-12-01T00:00:00Z\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    ).encode()
    return head + http + b"\r\n\r\n"


def _ids(path: Path) -> list[str]:
    fmt, stem = detect_format(str(path))
    tables = read_unit(
        (InputFile(str(path), fmt, stem),), stem, shard_rows=100, batch_rows=10, eval_fraction=0.0
    )
    return [row["id"] for table in tables for row in table.to_pylist()]


def test_arc_records_get_the_same_ids_on_every_read(tmp_path: Path) -> None:
    """warcio converts an ARC record to WARC headers with a random uuid4 WARC-Record-ID: the ids
    (and so the shards, the dedup keep-choice and a resume) changed from run to run."""
    path = tmp_path / "crawl.arc.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(_arc_record("http://a.example/", "first page about cats"))
        handle.write(_arc_record("http://b.example/", "second page about dogs"))
    first = _ids(path)
    assert first == _ids(path)
    assert len(first) == 2 and len(set(first)) == 2
    assert all(doc_id.startswith("crawl/crawl.arc.gz@") for doc_id in first), first


def test_a_damaged_warc_header_mid_file_gets_a_stable_id(tmp_path: Path) -> None:
    """warcio goes no further than a line that is no WARC header: the rest of the file is one
    reject row, named by its offset, the same on every read."""
    path = tmp_path / "pages.warc"
    garbage = b"this line is not a WARC header\r\n\r\n"
    first_record = _warc_record("a", "one")
    path.write_bytes(first_record + garbage + _warc_record("c", "three"))
    first = _ids(path)
    assert first == _ids(path)
    assert first == ["pages/urn:uuid:a", f"pages/pages.warc@{len(first_record)}+"], first


def _latin1_crawl(tmp_path: Path) -> tuple[Path, bytes]:
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    (crawl / "good.jsonl").write_text('{"id": "g", "text": "An ordinary page about the sea."}\n')
    bad = os.fsencode(crawl) + b"/caf\xe9.jsonl"  # Latin-1: not valid UTF-8
    with open(bad, "wb") as handle:
        handle.write(b'{"id": "c", "text": "A page whose file name is Latin-1."}\n')
    return crawl, bad


def test_a_file_name_that_is_not_utf8_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """It was a traceback (pyarrow cannot take the name; with on_unreadable=reject a crash in
    the fingerprinting) or an error blaming the file's bytes."""
    crawl, bad = _latin1_crawl(tmp_path)
    skipped: list[dict[str, str]] = []
    files = plan_inputs([str(crawl)], skipped)
    assert [f.path for f in files] == [str(crawl / "good.jsonl")]
    [entry] = skipped
    assert entry["path"] == f"{crawl}/caf\\xe9.jsonl"  # shown escaped, and JSON can hold it
    assert "not valid UTF-8" in entry["reason"] and "rename" in entry["reason"]
    json.dumps(skipped, ensure_ascii=False).encode("utf-8")
    with pytest.raises(InputError, match=r"caf\\xe9\.jsonl.*not valid UTF-8.*rename"):
        plan_inputs([os.fsdecode(bad)])
