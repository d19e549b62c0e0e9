"""Where the framer goes on after a damaged WARC record: at the next record start even with no
blank line before it (a record cut short and the next one written right after it), at the next
gzip member of a WARC.gz, and never at a `WARC/1.0` line inside a page when the lengths are right.
Each record of the file is a kept row equal to warcio's reading of the undamaged file, or one
reject row."""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
from pathlib import Path

import pytest

from pretrain.sample import sample_dir
from tests.data_pipeline.test_warc_framing import (
    _file,
    _kept,
    _reasons,
    _record,
    _rows,
    _uuid,
    _warcio,
)
from tests.data_pipeline.test_warc_fuzz import members

_LIMIT = {"max_input_bytes": 100_000}
_SAMPLE_RECORDS = [
    r for r in members((sample_dir() / "web.warc.gz").read_bytes()) if len(r) < 8_000
]


def _cut(record: bytes, keep: int, tail: bytes) -> bytes:
    """The first `keep` bytes of a record (what a crashed writer left), then `tail`."""
    return record[:keep] + tail


def _expected(good: list[bytes], gz: bool, lost: set[int]) -> list[tuple[str, bytes]]:
    return [(r, p) for n, (r, _, p) in enumerate(_warcio(_file(good, gz))) if n not in lost]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("tail", [b"", b"\n", b"\r\n"], ids=["glued", "lf", "crlf"])
@pytest.mark.parametrize("into", ["block", "payload-end"])
def test_a_record_cut_short_and_the_next_right_after_it_keeps_the_next(
    tmp_path: Path, gz: bool, tail: bytes, into: str
) -> None:
    """Before, the framer resynced only at a `WARC/1.` line after a blank line: the record after
    the cut one was read past inside the cut one's reject, lost without a row of its own."""
    good = [_record(i) for i in range(5)]
    keep = len(good[2]) - (200 if into == "block" else 30)
    damaged = [_cut(r, keep, tail) if i == 2 else r for i, r in enumerate(good)]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {2})
    assert _reasons(rows) == [(_uuid(2), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("tail", [b"", b"\r\n"], ids=["glued", "crlf"])
def test_two_cut_records_in_a_row_are_two_rejects(tmp_path: Path, gz: bool, tail: bytes) -> None:
    good = [_record(i) for i in range(5)]
    damaged = [_cut(r, len(r) // 2, tail) if i in (1, 2) else r for i, r in enumerate(good)]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1, 2})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length"), (_uuid(2), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("at", [b"WARC-Date", b"2026-12", b"RC/1.0", b"Content-Length"])
def test_a_record_cut_inside_its_headers_keeps_the_next(
    tmp_path: Path, gz: bool, at: bytes
) -> None:
    """Cut at a line start, mid-line, in its first line or before its own Content-Length: its
    headers ran on into the next record's, and both were one reject (the next record lost)."""
    good = [_record(i) for i in range(4)]
    keep = good[1].index(at)
    damaged = [_cut(r, keep, b"") if i == 1 else r for i, r in enumerate(good)]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    # Named by its id when the cut kept it, else by its offset.
    offset = _warcio(_file(good, gz))[1][1]
    suffix = ".gz" if gz else ""
    name = _uuid(1) if b"WARC-Record-ID" in good[1][:keep] else f"in.warc{suffix}@{offset}"
    assert _reasons(rows) == [(name, "malformed_record")]


def _page_about_warc(i: int) -> bytes:
    """A record whose page quotes WARC records, at line starts and after blank lines."""
    quoted = (
        b"\r\n\r\nWARC/1.0\r\nWARC-Type: response\r\nContent-Length: 5\r\n\r\nhello\r\n\r\n"
        b"WARC/1.1\nnot a header line\nWARC/1.0\r\n"
    )
    head, block = _record(i).split(b"\r\n\r\n", 1)
    block = block.removesuffix(b"\r\n\r\n").replace(b"</p>", quoted + b"</p>")
    head = re.sub(rb"Content-Length: [0-9]+", b"Content-Length: %d" % len(block), head)
    return head + b"\r\n\r\n" + block + b"\r\n\r\n"


def _with_digest(record: bytes) -> bytes:
    """The record with its WARC-Block-Digest (sha1, base32, as warcio and Common Crawl write)."""
    head, block = record.split(b"\r\n\r\n", 1)
    digest = base64.b32encode(hashlib.sha1(block.removesuffix(b"\r\n\r\n")).digest())
    return head + b"\r\nWARC-Block-Digest: sha1:" + digest + b"\r\n\r\n" + block


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("max_input_bytes", [100_000, 200])
@pytest.mark.parametrize("digest", [False, True])
def test_warc_lines_inside_a_page_with_right_lengths_are_no_record_start(
    tmp_path: Path, gz: bool, max_input_bytes: int, digest: bool
) -> None:
    """Read whole as warcio reads it; over the record limit (200 bytes: 400), read past as one
    record_too_large reject while the records around it are kept."""
    good = [_record(0, body_size=10), _page_about_warc(1), _record(2, body_size=10)]
    good = [_with_digest(r) for r in good] if digest else good
    rows = _rows(tmp_path, _file(good, gz), gz, max_input_bytes=max_input_bytes)
    if max_input_bytes == 200:
        assert _kept(rows) == _expected(good, gz, {1})
        assert _reasons(rows) == [(_uuid(1), "record_too_large")]
    else:
        assert _kept(rows) == _expected(good, gz, set()) and not _reasons(rows)


@pytest.mark.parametrize("gz", [False, True])
def test_a_warc_line_of_text_after_a_cut_is_no_record_start(tmp_path: Path, gz: bool) -> None:
    """The cut record's rest holds `WARC/1.1` lines with no header field after them: they stay
    inside its one reject, not rejects of their own."""
    good = [_record(i) for i in range(3)]
    page = _page_about_warc(1)
    text = page[page.index(b"WARC/1.1\nnot") :]
    keep = page.index(b"\r\n\r\nWARC/1.0") - 20
    damaged = [good[0], _cut(page, keep, b"\n") + text, good[2]]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


def test_a_gzip_member_start_is_a_record_start_after_damage(tmp_path: Path) -> None:
    """One record per member: the member after a cut record starts a record even when its first
    header line is damaged (no `Name:` after the version line): that record is one reject, the
    next one is kept. Before, it was read past inside the cut record's reject (no row: lost)."""
    good = [_record(i) for i in range(4)]
    odd = good[2].replace(b"WARC/1.0\r\nWARC-Type", b"WARC/1.0\r\n\x00ARC-Type", 1)
    members = [good[0], _cut(good[1], len(good[1]) // 2, b""), odd, good[3]]
    data = b"".join(gzip.compress(r, mtime=0) for r in members)
    rows = _rows(tmp_path, data, True, **_LIMIT)
    assert _kept(rows) == _expected(good, True, {1, 2})
    assert [reason for _, reason in _reasons(rows)] == ["bad_content_length", "malformed_record"]


@pytest.mark.parametrize("gz", [False, True])
def test_a_cut_record_whose_length_ends_where_the_next_one_ends_is_refuted_by_its_digest(
    tmp_path: Path, gz: bool
) -> None:
    """Record 1 cut so that its Content-Length ends where record 2 (written right after the cut)
    ends: before, record 1 was kept with record 2's bytes as its page and record 2 was lost. The
    block holds a record start, so its WARC-Block-Digest is checked: it fails, record 1 is a
    reject and record 2 is kept. (With no digest: test_warc_evidence.)"""
    good = [_with_digest(_record(i, body_size=size)) for i, size in enumerate([300, 900, 200, 300])]
    damaged = [good[0], good[1][: len(good[1]) - len(good[2])], good[2], good[3]]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


@pytest.mark.parametrize(("first", "cut"), [(2, 1698), (6, 2078)])
def test_a_gzip_member_cut_short_keeps_the_members_after_it(
    tmp_path: Path, first: int, cut: int
) -> None:
    """zlib can read the next members' bytes as more of the cut member's data to the end of the
    file (these cuts of real sample records were found by a search): reading could not go on at
    a later member (the bytes were given to zlib already), and the three records after the cut
    one were lost. Now it goes back to the first member after the cut one's start."""
    records = _SAMPLE_RECORDS[first - 2 : first + 4]
    members = [gzip.compress(r, mtime=0) for r in records]
    members[2] = members[2][:cut]
    rows = _rows(tmp_path, b"".join(members), True)
    assert _kept(rows) == [
        (r, p) for n, (r, _, p) in enumerate(_warcio(_file(records, True))) if n != 2
    ]
    assert [r for _, r in _reasons(rows)] == ["truncated_record"]


def test_a_cut_record_in_a_whole_member_before_a_corrupt_one_is_a_reject_of_its_own(
    tmp_path: Path,
) -> None:
    """Member 1 holds a record cut short (its gzip is whole), member 2 is corrupt: before, the
    cut record was taken for the corrupt member's and only corrupt_gzip was counted (lost)."""
    good = [_record(i) for i in range(4)]
    members = [gzip.compress(r, mtime=0) for r in good]
    members[1] = gzip.compress(good[1][: len(good[1]) // 2], mtime=0)
    members[2] = members[2][:20] + bytes(b ^ 0xFF for b in members[2][20:40]) + members[2][40:]
    rows = _rows(tmp_path, b"".join(members), True, **_LIMIT)
    assert _kept(rows) == _expected(good, True, {1, 2})
    assert [r for _, r in _reasons(rows)] == ["truncated_record", "corrupt_gzip"]
