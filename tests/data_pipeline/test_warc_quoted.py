"""Good WARC records whose content quotes a WARC record (a page documenting the format, a
text file holding record headers, a resource that is one archived record): every record is kept
as warcio reads it, with no reject. Before, a quoted `WARC/1.0` line with made-up fields after it
was taken for a record start inside a block with a wrong length: the page was a
`bad_content_length` reject and the quote a reject (or a kept document) of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data_pipeline.test_warc_framing import _file, _reasons, _record, _rows, _uuid, _warcio


def _with_block(i: int, block: bytes, kind: bytes, content_type: bytes, end: bytes) -> bytes:
    head = (
        b"WARC/1.0\r\nWARC-Type: " + kind + b"\r\n"
        b"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-%012d>\r\n"
        % i
        + b"WARC-Target-URI: http://x/%d\r\nContent-Type: " % i
        + content_type
        + b"\r\nContent-Length: %d\r\n\r\n" % len(block)
    )
    return head + block + end


def _page(body: bytes, http_length: bool) -> bytes:
    """An HTTP response, with or without its own Content-Length (a close-delimited body)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
    head += b"Content-Length: %d\r\n" % len(body) if http_length else b""
    return head + b"\r\n" + body


_HTTP = b"application/http; msgtype=response"
_GLUED = (
    b"<html><p>A response record starts so:</p><pre>WARC/1.0\r\nWARC-Type: response\r\n"
    b"Content-Length: 99999\r\n\r\nHTTP/1.1 200 OK\r\n...</pre></html>"
)
"""A quote right after other bytes on its line whose length runs past the page."""
_GLUED_LF = (
    b"<pre>WARC/1.0\nWARC-Type: response\nWARC-Record-ID: <urn:uuid:quoted>\n"
    b"Content-Length: 4000\n\nHTTP/1.1 200 OK\n\nhi</pre>"
)
_LINE = (
    b"<html><p>Example:</p>\n<pre>\nWARC/1.0\nWARC-Type: response\nWARC-Record-ID: "
    b"<urn:uuid:quoted>\nContent-Length: 20\n\nHTTP/1.1 200 OK\n\nhi</pre></html>"
)
"""A quote on a line of its own."""
_ONE_RECORD = b"WARC/1.0\r\nWARC-Type: warcinfo\r\nContent-Length: 5\r\n\r\nhello"
_CRLF2 = b"\r\n\r\n"

_CASES = {
    "glued, HTTP length": lambda: _with_block(1, _page(_GLUED, True), b"response", _HTTP, _CRLF2),
    "glued, no HTTP length": lambda: _with_block(
        1, _page(_GLUED, False), b"response", _HTTP, _CRLF2
    ),
    "glued LF, HTTP length": lambda: _with_block(
        1, _page(_GLUED_LF, True), b"response", _HTTP, _CRLF2
    ),
    "glued LF, no HTTP length": lambda: _with_block(
        1, _page(_GLUED_LF, False), b"response", _HTTP, _CRLF2
    ),
    "own line, one CRLF after": lambda: _with_block(
        1, _page(_LINE, False), b"response", _HTTP, b"\r\n"
    ),
    "text resource, glued": lambda: _with_block(
        1, b"see: " + _GLUED_LF, b"resource", b"text/plain", _CRLF2
    ),
    "one archived record": lambda: _with_block(
        1, _ONE_RECORD, b"resource", b"application/warc", _CRLF2
    ),
}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("case", list(_CASES))
def test_a_record_quoting_a_warc_record_is_kept(tmp_path: Path, gz: bool, case: str) -> None:
    records = [_record(0), _CASES[case](), _record(2)]
    data = _file(records, gz)
    rows = _rows(tmp_path, data, gz, max_input_bytes=100_000)
    assert [(i, p) for i, p, _ in rows] == [(r, p) for r, _, p in _warcio(data)]
    assert [i for i, _, _ in rows] == [_uuid(0), _uuid(1), _uuid(2)] and not _reasons(rows)


@pytest.mark.parametrize("gz", [False, True])
def test_the_last_record_quoting_one_with_no_line_break_after_it_is_kept(
    tmp_path: Path, gz: bool
) -> None:
    """The file ends right after the block (no blank line): warcio reads the record whole."""
    records = [_record(0), _with_block(1, _page(_LINE, False), b"response", _HTTP, b"")]
    data = _file(records, gz)
    rows = _rows(tmp_path, data, gz, max_input_bytes=100_000)
    assert [(i, p) for i, p, _ in rows] == [(r, p) for r, _, p in _warcio(data)]
    assert len(rows) == 2 and not _reasons(rows)
