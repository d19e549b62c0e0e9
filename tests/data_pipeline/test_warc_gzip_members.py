"""Damaged .jsonl.gz and .html.gz (read by Python's gzip): a corrupt member ends the file as one
`corrupt_gzip` reject, a cut one as one `truncated_input`, and the lines decoded before the damage
are kept. No resync to a later member: a crawl's JSON Lines files are one gzip stream."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from tests.data_pipeline.readall import read_all


def _members(count: int, lines: int) -> tuple[list[bytes], list[list[str]]]:
    texts = [[f"member {m} line {i}: " + "words " * 20 for i in range(lines)] for m in range(count)]
    raw = [
        b"".join(json.dumps({"id": t[:16], "text": t}).encode() + b"\n" for t in member)
        for member in texts
    ]
    return [gzip.compress(r, mtime=0) for r in raw], texts


def _damage(data: bytes, at: int) -> bytes:
    return data[:at] + bytes(b ^ 0xFF for b in data[at : at + 20]) + data[at + 20 :]


def _texts_and_reasons(path: Path) -> tuple[list[str], list[str]]:
    table, stats = read_all(path)
    assert stats["records"] == table.num_rows
    reasons = table.column("_read_reason").to_pylist()
    texts = [t for t, r in zip(table.column("text").to_pylist(), reasons) if r is None]
    return texts, [r for r in reasons if r is not None]


@pytest.mark.parametrize("member", [0, 1, 3])
def test_a_corrupt_jsonl_gz_member_is_one_reject_for_the_rest_of_the_file(
    tmp_path: Path, member: int
) -> None:
    members, texts = _members(4, 30)
    start = sum(len(m) for m in members[:member]) + 30  # inside its deflate data
    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(_damage(b"".join(members), start))
    kept, reasons = _texts_and_reasons(path)
    assert kept == [t for lines in texts[:member] for t in lines]
    assert reasons == ["corrupt_gzip"]


def test_a_cut_jsonl_gz_keeps_every_line_decoded_before_the_cut(tmp_path: Path) -> None:
    members, texts = _members(1, 400)
    cut = members[0][: len(members[0]) * 2 // 3]
    decoded = zlib.decompressobj(wbits=31).decompress(cut)
    whole_lines = decoded.count(b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(cut)
    kept, reasons = _texts_and_reasons(path)
    assert kept == texts[0][:whole_lines] and reasons == ["truncated_input"]


def test_a_damaged_html_gz_is_one_reject(tmp_path: Path) -> None:
    page = b"<html><body>" + b"<p>a paragraph of the page</p>" * 200 + b"</body></html>"
    whole = gzip.compress(page, mtime=0)
    (tmp_path / "page.html.gz").write_bytes(whole)
    table, _ = read_all(tmp_path / "page.html.gz")
    assert table.column("_payload").to_pylist() == [page]
    (tmp_path / "bad.html.gz").write_bytes(_damage(whole, 30))
    (tmp_path / "cut.html.gz").write_bytes(whole[: len(whole) // 2])
    for name, reason in (("bad", "corrupt_gzip"), ("cut", "truncated_input")):
        table, _ = read_all(tmp_path / f"{name}.html.gz")
        assert table.column("_read_reason").to_pylist() == [reason]
        assert table.column("_payload").to_pylist() == [None]
