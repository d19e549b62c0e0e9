"""WARC records whose Content-Length is wrong, records over the record limit, and the offsets
records are named by: the records around the damage are kept, the same as warcio reads them from
the undamaged file, and the damage is one reason-coded reject."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.data_pipeline.readall import read_all


def _record(i: int, *, with_id: bool = True, declared: int = 0, body_size: int = 300) -> bytes:
    """One WARC response record; `declared` is added to its true Content-Length."""
    body = f"<html><body><p>page {i} ".encode() + b"x" * body_size + b"</p></body></html>"
    block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + body
    record_id = f"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{i:012d}>\r\n"
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        + (record_id if with_id else "")
        + f"WARC-Target-URI: http://x/{i}\r\nWARC-Date: 2026-12-01T00:00:00Z\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(block) + declared}\r\n\r\n"
    ).encode()
    return head + block + b"\r\n\r\n"


def _file(records: list[bytes], gz: bool) -> bytes:
    """The records as a plain WARC, or a WARC.gz of one gzip member per record."""
    return b"".join(gzip.compress(r, mtime=0) for r in records) if gz else b"".join(records)


def _warcio(data: bytes) -> list[tuple[str, int, bytes]]:
    """(record id or "", offset, payload) of every response as warcio reads the file."""
    iterator = ArchiveIterator(io.BytesIO(data))
    rows = []
    for record in iterator:
        record_id = (record.rec_headers.get_header("WARC-Record-ID") or "").strip("<>")
        payload = record.content_stream().read()
        rows.append((record_id, iterator.get_record_offset(), payload))
    return rows


def _rows(tmp_path: Path, data: bytes, gz: bool, **kwargs) -> list[tuple[str, bytes | None, str]]:
    path = tmp_path / ("in.warc.gz" if gz else "in.warc")
    path.write_bytes(data)
    table, stats = read_all(path, **kwargs)
    assert stats["records"] == table.num_rows
    return list(
        zip(
            [i.removeprefix("in/") for i in table.column("id").to_pylist()],
            table.column("_payload").to_pylist(),
            table.column("_read_reason").to_pylist(),
        )
    )


def _kept(rows: list) -> list[tuple[str, bytes]]:
    return [(i, p) for i, p, reason in rows if reason is None]


def _reasons(rows: list) -> list[tuple[str, str]]:
    return [(i, reason) for i, _, reason in rows if reason is not None]


def _uuid(i: int) -> str:
    return f"urn:uuid:00000000-0000-0000-0000-{i:012d}"


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("declared", [1500, 40, -40, -300])
@pytest.mark.parametrize("bad", [1, 3])
def test_a_wrong_content_length_rejects_that_record_and_keeps_the_next(
    tmp_path: Path, gz: bool, declared: int, bad: int
) -> None:
    """Too large (past the next record, or inside its headers) or too small (inside the page):
    before, one too large swallowed the records after it into one truncated_record, and one too
    small ended the file (warcio found no WARC/ line where the next record began)."""
    good = [_record(i) for i in range(5)]
    damaged = [_record(i, declared=declared) if i == bad else good[i] for i in range(5)]
    rows = _rows(tmp_path, _file(damaged, gz), gz, max_input_bytes=100_000)
    expected = [(r, p) for n, (r, _, p) in enumerate(_warcio(_file(good, gz))) if n != bad]
    assert _kept(rows) == expected
    assert _reasons(rows) == [(_uuid(bad), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_content_length_past_the_record_limit_resyncs_too(tmp_path: Path, gz: bool) -> None:
    """A length of 10 GB declared on a small record: read past without holding it, and the records
    after it (inside the declared block) are still found."""
    good = [_record(i) for i in range(4)]
    damaged = [_record(1, declared=10_000_000_000) if i == 1 else r for i, r in enumerate(good)]
    rows = _rows(tmp_path, _file(damaged, gz), gz, max_input_bytes=2_000)
    expected = [(r, p) for n, (r, _, p) in enumerate(_warcio(_file(good, gz))) if n != 1]
    assert _kept(rows) == expected
    assert _reasons(rows) == [(_uuid(1), "bad_content_length")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_record_over_the_record_limit_is_a_reject_and_the_stream_goes_on(
    tmp_path: Path, gz: bool
) -> None:
    """max_input_bytes 2,000: the record limit is 4,000 (WARC_RECORD_FACTOR 2). A record of
    ~50 KB with a right length is read past as record_too_large; one of 3,000 bytes is held and
    its payload is a too_large reject, as before."""
    records = [_record(0), _record(1, body_size=50_000), _record(2, body_size=2_500), _record(3)]
    data = _file(records, gz)
    rows = _rows(tmp_path, data, gz, max_input_bytes=2_000)
    expected = [(r, p) for n, (r, _, p) in enumerate(_warcio(data)) if n in (0, 3)]
    assert _kept(rows) == expected
    assert _reasons(rows) == [(_uuid(1), "record_too_large"), (_uuid(2), "too_large")]
    sizes = {i: size for i, size in zip(*_sizes(tmp_path, data, gz))}
    assert sizes[_uuid(1)] == len(records[1]) - len(records[1].split(b"\r\n\r\n", 1)[0]) - 8


def _sizes(tmp_path: Path, data: bytes, gz: bool) -> tuple[list[str], list[int]]:
    path = tmp_path / ("in.warc.gz" if gz else "in.warc")
    path.write_bytes(data)
    table, _ = read_all(path, max_input_bytes=2_000)
    ids = [i.removeprefix("in/") for i in table.column("id").to_pylist()]
    return ids, table.column("_raw_bytes").to_pylist()


@pytest.mark.parametrize("gz", [False, True])
def test_records_without_an_id_are_named_by_warcios_offsets_also_after_damage(
    tmp_path: Path, gz: bool
) -> None:
    """A record with no WARC-Record-ID is named `FILE@OFFSET`. In a WARC.gz the offset is its gzip
    member's, as warcio (and a CDX index) gives it; before, it was the offset in the decoded
    bytes, and after a corrupt member it started again at 0."""
    good = [_record(i, with_id=False) for i in range(5)]
    data = _file(good, gz)
    expected = [(f"in.warc{'.gz' if gz else ''}@{o}", p) for _, o, p in _warcio(data)]
    assert _kept(_rows(tmp_path, data, gz)) == expected
    if not gz:
        return
    members = [gzip.compress(r, mtime=0) for r in good]
    start = len(members[0]) + 20  # inside member 1's deflate data
    damaged = data[:start] + bytes(b ^ 0xFF for b in data[start : start + 20]) + data[start + 20 :]
    rows = _rows(tmp_path, damaged, gz)
    assert _kept(rows) == [e for n, e in enumerate(expected) if n != 1]
    assert [reason for _, reason in _reasons(rows)] == ["corrupt_gzip"]


@pytest.mark.parametrize("separator", [b"\r\n", b"\n", b"\n\n\r\n\r\n\r\n"])
def test_records_with_loose_separators_read_as_warcio_reads_them(
    tmp_path: Path, separator: bytes
) -> None:
    """Writers that end a record with fewer (or more) line breaks than the standard's blank line:
    warcio reads them, so the framer must not take them for wrong lengths."""
    records = [_record(i).removesuffix(b"\r\n\r\n") + separator for i in range(4)]
    data = b"".join(records)
    expected = [(r, p) for r, _, p in _warcio(data)]
    assert len(expected) == 4
    rows = _rows(tmp_path, data, False)
    assert _kept(rows) == expected and not _reasons(rows)


def test_arc_gz_records_are_named_by_warcios_member_offsets_also_after_damage(
    tmp_path: Path,
) -> None:
    """An ARC record has no id: it is named by its offset. One gzip member per record: warcio's
    offsets; after a corrupt member they went on from 0 (the decoded bytes since the resume)."""
    body = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<p>An archived page %d.</p>"
    members = []
    for i in range(4):
        page = body % i
        head = b"http://a.example/%d 10.0.0.1 20260101000000 text/html %d\n" % (i, len(page))
        members.append(gzip.compress(head + page + b"\n", mtime=0))
    data = b"".join(members)
    iterator = ArchiveIterator(io.BytesIO(data), arc2warc=True)
    offsets = []
    for record in iterator:
        record.content_stream().read()
        offsets.append(iterator.get_record_offset())
    start = len(members[0]) + 20
    damaged = data[:start] + bytes(b ^ 0xFF for b in data[start : start + 20]) + data[start + 20 :]
    for content, kept in ((data, [0, 1, 2, 3]), (damaged, [0, 2, 3])):
        rows = _rows(tmp_path, content, True)
        assert [i for i, _ in _kept(rows)] == [f"in.warc.gz@{offsets[n]}" for n in kept]


@pytest.mark.parametrize("junk", [b"\x00\x01 not a WARC at all\r\n\r\n", b"<html>stray bytes\n\n"])
def test_bytes_before_the_first_record_are_one_reject(tmp_path: Path, junk: bytes) -> None:
    """Before, a plain WARC that did not start with `WARC/` went to warcio's ARC reading, which
    gave up: every record of the file was lost in one truncated_record."""
    good = [_record(i) for i in range(3)]
    data = _file(good, False)
    rows = _rows(tmp_path, junk + data, False)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(data)]
    assert _reasons(rows) == [("in.warc@0", "malformed_record")]
