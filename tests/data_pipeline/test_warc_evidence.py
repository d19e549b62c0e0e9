"""Every WARC record accounted for when its headers lie and there is no WARC-Block-Digest: a
damaged WARC-Type value is a reject row (it was read past without one), and a Content-Length
that lands on another record's start or end is found out by what else the record says (its
WARC-Payload-Digest, its HTTP message's own Content-Length or chunking, the blank line that ends
a block, the length a record inside it declares): one `bad_content_length` row, and the records
it would have swallowed are kept. Before, the wrong record was kept with the next records' bytes
as its page and those records were lost without a row."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from tests.data_pipeline.test_warc_framing import _file, _kept, _reasons, _record, _rows, _uuid
from tests.data_pipeline.test_warc_framing import _warcio as _warcio_rows

_LIMIT = {"max_input_bytes": 100_000}


def _http_record(
    i: int, *, chunked: bool = False, payload_digest: bool = False, text: bytes = b""
) -> bytes:
    """A response whose HTTP message has its own framing (Content-Length, or chunks)."""
    body = f"<html><body><p>page {i} ".encode() + b"y" * (200 + 37 * i) + text + b"</p></body>"
    if chunked:
        wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (body[:100], body[100:]))
        http = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire + b"0\r\n\r\n"
    else:
        http = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    digest = base64.b32encode(hashlib.sha1(http.split(b"\r\n\r\n", 1)[1]).digest())
    head = (
        b"WARC/1.0\r\nWARC-Type: response\r\n"
        b"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-%012d>\r\n"
        % i
        + b"WARC-Target-URI: http://x/%d\r\n" % i
        + (b"WARC-Payload-Digest: sha1:" + digest + b"\r\n" if payload_digest else b"")
        + b"Content-Type: application/http; msgtype=response\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(http)
    )
    return head + http + b"\r\n\r\n"


def _declare(record: bytes, length: int) -> bytes:
    head, block = record.split(b"\r\n\r\n", 1)
    head = re.sub(rb"Content-Length: [0-9]+", b"Content-Length: %d" % length, head)
    return head + b"\r\n\r\n" + block


def _block_length(record: bytes) -> int:
    return len(record) - len(record.split(b"\r\n\r\n", 1)[0]) - 8


def _expected(good: list[bytes], gz: bool, lost: set[int]) -> list[tuple[str, bytes]]:
    whole = _warcio_rows(_file(good, gz))
    return [(r, p) for n, (r, _, p) in enumerate(whole) if n not in lost]


_MAKERS = {
    "plain": lambda i: _record(i),
    "http-length": lambda i: _http_record(i),
    "chunked": lambda i: _http_record(i, chunked=True),
    "payload-digest": lambda i: _http_record(i, payload_digest=True),
}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("kind", list(_MAKERS))
@pytest.mark.parametrize("lands", ["start", "end"])
def test_a_length_landing_on_a_later_record_is_found_out_without_a_block_digest(
    tmp_path: Path, gz: bool, kind: str, lands: str
) -> None:
    """Record 1's length ends at record 3's start (no blank line after its block) or at record
    2's end (a blank line, then record 3): records 2 (and the rest) must still be kept."""
    good = [_MAKERS[kind](i) for i in range(5)]
    swallowed = len(good[2]) - (4 if lands == "end" else 0)
    damaged = list(good)
    damaged[1] = _declare(good[1], _block_length(good[1]) + 4 + swallowed)
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_cut_record_whose_length_ends_where_the_next_one_ends_is_found_out_without_digests(
    tmp_path: Path, gz: bool
) -> None:
    """Record 1 cut so that its length ends where record 2, written right after the cut, ends:
    no digest and no HTTP length, but record 2 declares a length that ends where record 1's
    block does (a block holding a whole record would end after that record's blank line)."""
    good = [_record(i, body_size=size) for i, size in enumerate([300, 900, 200, 300])]
    damaged = [good[0], good[1][: len(good[1]) - len(good[2])], good[2], good[3]]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_too_small_length_on_a_blank_line_is_found_out_by_the_http_length(
    tmp_path: Path, gz: bool
) -> None:
    """Record 1's length ends at a blank line inside its page: its HTTP Content-Length ends at
    record 2's start, so record 1 is a reject (it was kept cut short, its rest another reject)."""
    good = [_http_record(i, text=b"\r\n\r\nmore" if i == 1 else b"") for i in range(4)]
    head = good[1].split(b"\r\n\r\n", 1)[0]
    damaged = list(good)
    damaged[1] = _declare(good[1], good[1].index(b"\r\n\r\nmore") - len(head) - 4)
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_resource_holding_a_whole_warc_file_is_kept(tmp_path: Path, gz: bool) -> None:
    """A good record may hold WARC records (an archived .warc): its block ends after their blank
    line and its own blank line follows; the evidence above must not refuse it."""
    inner = _record(7) + _record(8)
    head = (
        b"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-"
        b"000000000001>\r\nWARC-Target-URI: http://x/a.warc\r\nContent-Type: application/warc\r\n"
        b"Content-Length: %d\r\n\r\n" % len(inner)
    )
    good = [_record(0), head + inner + b"\r\n\r\n", _record(2)]
    rows = _rows(tmp_path, _file(good, gz), gz, **_LIMIT)
    assert [i for i, _, reason in rows if reason is None] == [_uuid(0), _uuid(1), _uuid(2)]
    assert not _reasons(rows)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("value", [b"resp\x13nse", b"Response", b"", b"respons"])
def test_a_damaged_warc_type_value_is_a_reject_row(tmp_path: Path, gz: bool, value: bytes) -> None:
    """Before, a record whose WARC-Type value is none of WARC's was read past without a row."""
    good = [_record(i) for i in range(3)]
    damaged = [
        r.replace(b"WARC-Type: response", b"WARC-Type: " + value) if i == 1 else r
        for i, r in enumerate(good)
    ]
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1})
    assert _reasons(rows) == [(_uuid(1), "malformed_record")]


def test_a_request_record_is_still_read_past(tmp_path: Path) -> None:
    good = [_record(0), _record(1).replace(b"WARC-Type: response", b"WARC-Type: request")]
    rows = _rows(tmp_path, _file(good, False), False, **_LIMIT)
    assert [(i, r) for i, _, r in rows] == [(_uuid(0), None)]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("lands", ["start", "end"])
def test_a_length_landing_past_two_records_the_later_one_damaged_too_is_found_out(
    tmp_path: Path, gz: bool, lands: str
) -> None:
    """No digest, no HTTP length: record 1's length lands on record 4's start (or record 3's
    end) and record 3's length is wrong too. Record 2 ends by its length where record 3 starts,
    as records in a file do, and record 3's does not: before, record 1 was kept with records 2
    and 3 as its page, and those two lost without a row (in the `end` case)."""
    good = [_record(i) for i in range(6)]
    damaged = list(good)
    damaged[3] = _declare(good[3], _block_length(good[3]) + 700)
    swallowed = len(damaged[2]) + len(damaged[3]) - (4 if lands == "end" else 0)
    damaged[1] = _declare(good[1], _block_length(good[1]) + 4 + swallowed)
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {1, 3})
    assert _reasons(rows) == [(_uuid(1), "bad_content_length"), (_uuid(3), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_length_landing_on_the_files_end_past_a_cut_record_is_found_out(
    tmp_path: Path, gz: bool
) -> None:
    """The last record is cut short (a crashed writer) and the one before declares a length that
    ends where the file does, with no line break after it: the file ends inside a record."""
    good = [_record(i) for i in range(4)]
    damaged = list(good)
    damaged[3] = good[3][: len(good[3]) - 120]
    damaged[2] = _declare(good[2], _block_length(good[2]) + 4 + len(damaged[3]))
    rows = _rows(tmp_path, _file(damaged, gz), gz, **_LIMIT)
    assert _kept(rows) == _expected(good, gz, {2, 3})
    assert _reasons(rows) == [(_uuid(2), "bad_content_length"), (_uuid(3), "truncated_record")]
