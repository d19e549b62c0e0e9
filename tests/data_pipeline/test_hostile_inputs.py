"""Hostile inputs no other test had. A compression bomb (a small file that expands to one huge
record) must cost the reader a bounded amount of memory and become a `too_large` reject, with
every byte and the records after it accounted for. A directory holding a symbolic link loop, a
FIFO or a link to nothing is planned in bounded time with each of them accounted for."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pretrain_app.cli import main
from tests.data_pipeline.readall import read_all

CAP = 256 << 10  # the extract stage's max_input_bytes in these tests
HUGE = 64 << 20  # what the bomb's one record expands to (the file is a few hundred KB)


def _read_peak(path: Path) -> tuple[pa.Table | None, dict, int]:
    """Every row the reader gives for `path`, its stats and the peak Python memory it used
    (after a first read of a small file of the same format, so imports are not counted)."""
    small = path.with_name("small" + path.name[path.name.find(".") :])
    if small.suffix == ".parquet":
        pq.write_table(pa.table({"text": ["warm"]}), small)
    else:
        with (gzip.open if small.suffix == ".gz" else open)(small, "wb") as handle:
            handle.write(b'{"text": "warm"}\n' if ".jsonl" in small.name else b"<p>warm</p>")
    read_all(small, max_input_bytes=CAP)
    tracemalloc.start()
    try:
        table, stats = read_all(path, max_input_bytes=CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return table, stats, peak


def _gzip(path: Path, head: bytes, filler: bytes, tail: bytes) -> int:
    """Write head + filler repeated to HUGE bytes + tail, gzip'd; return the record's size."""
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(head)
        chunk = filler * ((1 << 20) // len(filler))
        for _ in range(HUGE // len(chunk)):
            handle.write(chunk)
        handle.write(tail)
    return len(head) + HUGE // len(chunk) * len(chunk)


def _warc_record(payload_size: int, uri: str) -> tuple[bytes, bytes]:
    """A WARC response record's head (headers) and the HTTP header block of its payload."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"
    warc = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{uri}>\r\nWARC-Target-URI: http://{uri}/\r\n"
        "WARC-Date: 2026-12-01T00:00:00Z\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http) + payload_size}\r\n\r\n"
    ).encode()
    return warc, http


def test_jsonl_bomb_is_a_bounded_too_large_reject_and_the_next_line_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bomb.jsonl.gz"
    tail = b'"}\n{"id": "after", "text": "a small document after the bomb"}\n'
    size = _gzip(path, b'{"id": "bomb", "text": "', b"a", tail) + 3  # the line with `"}\n`
    table, stats, peak = _read_peak(path)
    rows = {r["id"]: r for r in table.to_pylist()}
    bomb = rows["bomb/bomb.jsonl.gz:1"]  # named by its line: its id was never parsed
    assert bomb["_read_reason"] == "too_large" and bomb["text"] is None
    assert bomb["_raw_bytes"] == size  # every byte counted in the ledger
    assert rows["bomb/after"]["text"] == "a small document after the bomb"
    assert stats["records"] == 2 and stats["bytes"] == size + len(tail) - 3
    assert peak < HUGE // 4, f"reader held {peak / 1e6:.0f} MB for one {HUGE >> 20} MB record"


def test_html_bomb_is_a_bounded_too_large_reject(tmp_path: Path) -> None:
    path = tmp_path / "page.html.gz"
    size = _gzip(path, b"<html><body>", b"<p>aaaa</p>", b"</body></html>") + 14
    table, stats, peak = _read_peak(path)
    [row] = table.to_pylist()
    assert row["_read_reason"] == "too_large" and row["_payload"] is None
    assert row["_raw_bytes"] == size == stats["bytes"]
    assert peak < HUGE // 4, f"reader held {peak / 1e6:.0f} MB for one {HUGE >> 20} MB page"


def test_warc_bomb_record_is_a_bounded_too_large_reject_and_the_next_record_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crawl.warc.gz"
    warc, http = _warc_record(HUGE, "bomb.example")
    small_body = b"<html><body><p>a small page after the bomb</p></body></html>"
    warc2, http2 = _warc_record(len(small_body), "small.example")
    # one gzip member per record, as crawlers write them
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as member:
        member.write(warc + http)
        chunk = b"a" * (1 << 20)
        for _ in range(HUGE >> 20):
            member.write(chunk)
        member.write(b"\r\n\r\n")
    with gzip.GzipFile(fileobj=out, mode="wb") as member:
        member.write(warc2 + http2 + small_body + b"\r\n\r\n")
    path.write_bytes(out.getvalue())
    table, stats, peak = _read_peak(path)
    rows = {r["url"]: r for r in table.to_pylist()}
    # over the WARC record limit (2 x max_input_bytes): read past by its Content-Length
    assert rows["http://bomb.example/"]["_read_reason"] == "record_too_large"
    assert rows["http://bomb.example/"]["_raw_bytes"] == len(http) + HUGE
    assert rows["http://small.example/"]["_payload"] == small_body
    assert stats["records"] == 2
    assert peak < HUGE // 4, f"reader held {peak / 1e6:.0f} MB for one {HUGE >> 20} MB record"


@pytest.mark.parametrize("size", [CAP - 40, CAP + 1])
def test_records_near_the_cap_are_read_whole_or_rejected_like_extract_does(
    tmp_path: Path, size: int
) -> None:
    """A page of exactly the limit is read whole (extract parses it); one byte over is rejected
    when read, as extract would have rejected it."""
    path = tmp_path / "page.html"
    body = b"<html><body>" + b"a" * (size - 26) + b"</body></html>"
    path.write_bytes(body)
    table, _, _ = _read_peak(path)
    [row] = table.to_pylist()
    if len(body) <= CAP:
        assert row["_read_reason"] is None and row["_payload"] == body
    else:
        assert row["_read_reason"] == "too_large" and row["_raw_bytes"] == len(body)


def _tree_with_a_loop(tmp_path: Path) -> Path:
    """root/{a.jsonl, sub/b.jsonl, sub/up -> .., sub/self -> root, pipe.jsonl (a FIFO),
    dangling.jsonl -> nowhere}."""
    root = tmp_path / "crawl"
    (root / "sub").mkdir(parents=True)
    (root / "a.jsonl").write_text('{"text": "one document"}\n')
    (root / "sub" / "b.jsonl").write_text('{"text": "another document"}\n')
    (root / "sub" / "up").symlink_to("..")
    (root / "sub" / "self").symlink_to(root)
    os.mkfifo(root / "pipe.jsonl")
    (root / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    return root


def _plan_in_child(entries: list[str]) -> tuple[list[str], list[dict], str]:
    """plan_inputs in a child process with a time limit (a loop would never return)."""
    code = (
        "import json, sys\n"
        "from data_pipeline.inputs import plan_inputs\n"
        "from pretrain.errors import InputError\n"
        "skipped = []\n"
        "try:\n"
        "    files = [f.path for f in plan_inputs(json.loads(sys.argv[1]), skipped)]\n"
        "    print(json.dumps([files, skipped, '']))\n"
        "except InputError as exc:\n"
        "    print(json.dumps([[], skipped, str(exc)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(entries)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    files, skipped, error = json.loads(done.stdout)
    return files, skipped, error


def test_directory_with_a_symlink_loop_fifo_and_dangling_link_is_planned_and_accounted(
    tmp_path: Path,
) -> None:
    root = _tree_with_a_loop(tmp_path)
    files, skipped, error = _plan_in_child([str(root)])
    assert error == ""
    assert files == [str(root / "a.jsonl"), str(root / "sub" / "b.jsonl")]  # each once
    reasons = {s["path"]: s["reason"] for s in skipped}
    assert set(reasons) == {
        str(root / "pipe.jsonl"),
        str(root / "dangling.jsonl"),
        str(root / "sub" / "up"),
        str(root / "sub" / "self"),
    }
    assert "not a regular file" in reasons[str(root / "pipe.jsonl")]
    assert "points to nothing" in reasons[str(root / "dangling.jsonl")]
    assert "already read" in reasons[str(root / "sub" / "up")]


def test_recursive_glob_over_a_symlink_loop_and_a_fifo_named_directly_are_one_line_errors(
    tmp_path: Path,
) -> None:
    root = _tree_with_a_loop(tmp_path)
    files, _, error = _plan_in_child([f"{root}/**/*.jsonl"])
    assert not files and "symbolic link" in error and "loop" in error, error
    _, _, error = _plan_in_child([str(root / "pipe.jsonl")])
    assert "not a regular file" in error, error


def test_a_glob_matching_a_fifo_and_a_dangling_link_lists_them_as_skipped(tmp_path: Path) -> None:
    """`crawl/*.jsonl` matched a FIFO and a link to nothing: they were dropped with no record
    (a directory input lists them in skipped_files)."""
    root = _tree_with_a_loop(tmp_path)
    files, skipped, error = _plan_in_child([f"{root}/*.jsonl"])
    assert error == "" and files == [str(root / "a.jsonl")]
    reasons = {s["path"]: s["reason"] for s in skipped}
    assert set(reasons) == {str(root / "pipe.jsonl"), str(root / "dangling.jsonl")}
    assert "not a regular file" in reasons[str(root / "pipe.jsonl")]
    assert "points to nothing" in reasons[str(root / "dangling.jsonl")]


@pytest.mark.ray
def test_data_run_rejects_a_bomb_unparsed_and_accounts_for_odd_files(
    ray_local, tmp_path: Path
) -> None:
    """Through the real runner: the extract stage's limit reaches the readers (the bomb's row is
    rejected when read, never parsed: no extractor), a FIFO and a file whose name is not UTF-8
    in the input directory are in the ledger's skipped_files, an ARC record is kept under its
    offset (warcio gives it a random id), and the ledger balances."""
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    _gzip(crawl / "bomb.jsonl.gz", b'{"text": "', b"a", b'"}\n{"text": "after the bomb"}\n')
    os.mkfifo(crawl / "pipe.jsonl")
    with open(os.fsencode(crawl) + b"/caf\xe9.jsonl", "wb") as handle:  # Latin-1, not UTF-8
        handle.write(b'{"text": "a page whose file name is Latin-1"}\n')
    body = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<p>An archived page.</p>"
    with gzip.open(crawl / "old.arc.gz", "wb") as handle:
        handle.write(b"http://a.example/ 10.0.0.1 20260101000000 text/html %d\n" % len(body))
        handle.write(body + b"\n")
    out, config = tmp_path / "out", tmp_path / "job.yaml"
    config.write_text(f"inputs: [{crawl}]\noutput: {out}\n")
    argv = ["data", "run", str(config), "--set", f"stages.extract.max_input_bytes={CAP}", "-q"]
    assert main(argv) == 0
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["conservation"]["balanced"] and ledger["documents_in"] == 3
    [extract] = [s for s in ledger["stages"] if s["stage"] == "extract"]
    assert {k: v["documents"] for k, v in extract["reasons"].items()} == {"too_large": 1}
    skipped = [s["path"] for s in ledger["skipped_files"]]
    assert sorted(skipped) == [f"{crawl}/caf\\xe9.jsonl", str(crawl / "pipe.jsonl")]
    [reject] = pq.read_table(next((out / "_rejects").glob("*.pq"))).to_pylist()
    assert reject["extract_reason"] == "too_large" and reject["extractor"] is None
    kept = [
        r for p in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    assert {r["id"]: r["text"] for r in kept} == {
        "bomb/bomb.jsonl.gz:2": "after the bomb",
        "old/old.arc.gz@0": "An archived page.",
    }


def test_output_inside_an_input_directory_is_refused_before_any_work(tmp_path: Path) -> None:
    """A re-run would read the job's own shards (data/*.parquet) as input documents."""
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    (crawl / "a.jsonl").write_text('{"text": "one document"}\n')
    for output, inputs in (
        (crawl / "out", [crawl]),
        (tmp_path / "o", [tmp_path / "o" / "x.jsonl"]),
    ):
        output.mkdir(exist_ok=True)
        (output / "x.jsonl").write_text('{"text": "one document"}\n')
        config = tmp_path / "job.yaml"
        config.write_text(f"inputs: {[str(p) for p in inputs]}\noutput: {output}\n")
        argv = ["data", "run", str(config), "--dry-run"]
        assert main(argv) == 2
    assert not (crawl / "out" / "manifest.json").exists()


@pytest.mark.parametrize("suffix", [".warc", ".warc.gz"])
def test_warc_record_cut_short_of_its_content_length_is_a_truncated_record(
    tmp_path: Path, suffix: str
) -> None:
    """A record declaring 10 GB whose file ends after a few bytes: part of a page is not a
    document (it was kept as one), and the reader never asks for the declared 10 GB."""
    page = b"<html><body><p>a whole page</p></body></html>"
    warc, http = _warc_record(len(page), "whole.example")
    cut, cut_http = _warc_record(10_000_000_000 - 44, "cut.example")
    data = warc + http + page + b"\r\n\r\n" + cut + cut_http + b"<html><body><p>only the start"
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    table, stats, peak = _read_peak(path)
    rows = {r["url"]: r for r in table.to_pylist()}
    assert rows["http://whole.example/"]["_payload"] == page
    assert rows["http://whole.example/"]["_read_reason"] is None
    assert rows["http://cut.example/"]["_read_reason"] == "truncated_record"
    assert rows["http://cut.example/"]["_payload"] is None and stats["records"] == 2
    assert peak < HUGE // 4


def _parquet(path: Path, texts: list[str], **columns: list) -> None:
    ids = [f"r{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "text": texts, **columns}), path, compression="zstd")


def test_parquet_cells_over_the_record_cap_are_too_large_rejects_not_held(tmp_path: Path) -> None:
    """A Parquet cell is capped like a record of the other formats: a text over
    `max_input_bytes`, or a row whose cells total more than a JSON line may hold, is a
    `too_large` row that carries none of its cells on (the stages never see them)."""
    path = tmp_path / "cells.parquet"
    big = "a" * (CAP + 1)
    side = "b" * (8 * CAP + 1)
    texts = ["a small document", big, "fine text, huge side column", "after"]
    _parquet(path, texts, html=[None, None, side, None])
    table, stats, _ = _read_peak(path)
    rows = {r["id"]: r for r in table.to_pylist()}
    for key, size in (("r1", len(big)), ("r2", len(texts[2]))):
        assert rows[f"cells/{key}"]["_read_reason"] == "too_large"
        assert rows[f"cells/{key}"]["text"] is None and not rows[f"cells/{key}"]["meta"]
        assert rows[f"cells/{key}"]["_raw_bytes"] == size  # its text counted, as for any row
    assert rows["cells/r0"]["text"] == "a small document" and rows["cells/r3"]["text"] == "after"
    assert stats["records"] == 4 and table.nbytes < CAP


def test_parquet_reader_holds_one_batch_of_batch_rows_records(tmp_path: Path) -> None:
    """200 records just under the cap (50 MB decoded, a 0.1 MB file): the reader decodes
    `batch_rows` (10) records at a time, not 1,024 row-group rows into Python at once."""
    path = tmp_path / "near.parquet"
    _parquet(path, ["a" * (CAP - 100) + str(i) for i in range(200)])
    table, stats, peak = _read_peak(path)
    assert stats["records"] == 200 and table.column("_read_reason").null_count == 200
    assert peak < 30 * CAP, f"reader held {peak / 1e6:.0f} MB for 10-record batches"
