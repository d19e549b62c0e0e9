"""Damaged WARC(.gz) files: the records before (and, in a WARC.gz, after) the damage are kept,
the same as warcio reads them from the undamaged file, and the damage is one reject row."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from tests.data_pipeline.readall import read_all


def _warc(count: int, gz: bool) -> tuple[bytes, list[int]]:
    buf, offsets = io.BytesIO(), []
    writer = WARCWriter(buf, gzip=gz)
    for i in range(count):
        offsets.append(buf.tell())
        body = f"<html><body><p>page {i} ".encode() + b"words " * 50 + b"</p></body></html>"
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.0")
        record = writer.create_warc_record(
            f"http://x/{i}", "response", payload=io.BytesIO(body), http_headers=http
        )
        writer.write_record(record)
    offsets.append(buf.tell())
    return buf.getvalue(), offsets


def _warcio_records(data: bytes) -> list[tuple[str, bytes]]:
    """(record id, payload) of every response record as warcio reads the undamaged file."""
    return [
        (r.rec_headers.get_header("WARC-Record-ID").strip("<>"), r.content_stream().read())
        for r in ArchiveIterator(io.BytesIO(data))
        if r.rec_type == "response"
    ]


def _rows(tmp_path: Path, data: bytes, gz: bool) -> list[tuple[str, bytes | None, str | None]]:
    path = tmp_path / ("in.warc.gz" if gz else "in.warc")
    path.write_bytes(data)
    table, stats = read_all(path)
    assert stats["records"] == table.num_rows
    return list(
        zip(
            table.column("id").to_pylist(),
            table.column("_payload").to_pylist(),
            table.column("_read_reason").to_pylist(),
        )
    )


def _kept(rows: list) -> list[tuple[str, bytes]]:
    return [(i.removeprefix("in/"), p) for i, p, reason in rows if reason is None]


def _reasons(rows: list) -> list[str]:
    return [reason for _, _, reason in rows if reason is not None]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("into", [15, "middle"])
def test_a_file_cut_inside_a_record_keeps_the_records_before(tmp_path, gz, into) -> None:
    data, offsets = _warc(4, gz)
    start = offsets[2]
    cut = start + (into if isinstance(into, int) else (offsets[3] - start) // 2)
    rows = _rows(tmp_path, data[:cut], gz)
    assert _kept(rows) == _warcio_records(data)[:2]
    # 15 bytes in, the record's headers are cut (warcio yields a record with no type, once skipped
    # as a non-response record: a silent loss; the framer sees headers that never end); in a gzip
    # member nothing decodes. Further in, the record itself is cut short.
    assert _reasons(rows) == ["truncated_record"]


@pytest.mark.parametrize("member", [0, 1, 3])
def test_a_corrupt_gzip_member_is_one_reject_and_reading_goes_on(tmp_path, member) -> None:
    data, offsets = _warc(4, True)
    start = offsets[member] + 20
    damaged = data[:start] + bytes(b ^ 0xFF for b in data[start : start + 20]) + data[start + 20 :]
    rows = _rows(tmp_path, damaged, True)
    expected = [r for i, r in enumerate(_warcio_records(data)) if i != member]
    assert _kept(rows) == expected
    assert _reasons(rows) == ["corrupt_gzip"]


def test_bytes_after_the_last_member_are_counted(tmp_path) -> None:
    data, _ = _warc(3, True)
    rows = _rows(tmp_path, data + b"not gzip at all", True)
    assert _kept(rows) == _warcio_records(data)
    assert _reasons(rows) == ["corrupt_gzip"]


def test_an_undamaged_warc_gz_reads_as_warcio_reads_it(tmp_path) -> None:
    data, _ = _warc(5, True)
    rows = _rows(tmp_path, data, True)
    assert _kept(rows) == _warcio_records(data) and not _reasons(rows)
