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
