"""WARC(.gz) files read through warcio (data_pipeline/warc.py): undamaged files read as warcio
reads them, every record counted, and damage one reject row with its byte range, never a crash:
a damaged record costs itself where warcio can go on (a wrong length or type; in a .warc.gz of
one gzip member per record, any damage inside a record's block), and where it cannot (a corrupt
gzip member, bytes that are no record) the rest of the file is one `truncated_input` row."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from data_pipeline.warc import HEADER_LIMIT
from pretrain.sample import sample_dir
from tests.data_pipeline.readall import read_all
from tests.data_pipeline.test_hostile_inputs import HUGE, _read_peak


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


def _uuid(i: int) -> str:
    return f"urn:uuid:00000000-0000-0000-0000-{i:012d}"


def _members(records: list[bytes]) -> list[bytes]:
    return [gzip.compress(r, mtime=0) for r in records]


def _file(records: list[bytes], gz: bool) -> bytes:
    """The records as a plain WARC, or a WARC.gz of one gzip member per record."""
    return b"".join(_members(records)) if gz else b"".join(records)


def _warcio(data: bytes) -> list[tuple[str, int, bytes]]:
    """(record id or "", offset, payload) of every response as warcio reads the file."""
    iterator = ArchiveIterator(io.BytesIO(data))
    rows = []
    for record in iterator:
        record_id = (record.rec_headers.get_header("WARC-Record-ID") or "").strip("<>")
        payload = record.content_stream().read()
        rows.append((record_id, iterator.get_record_offset(), payload))
    return rows


def _rows(tmp_path: Path, data: bytes, gz: bool, **kwargs) -> list[tuple[str, bytes, str, str]]:
    """(id, payload, reason, byte range) of every row, the ledger's count checked."""
    path = tmp_path / ("in.warc.gz" if gz else "in.warc")
    path.write_bytes(data)
    table, stats = read_all(path, **kwargs)
    assert stats["records"] == table.num_rows
    metas = [dict((e["key"], e["str"]) for e in m or []) for m in table.column("meta").to_pylist()]
    return list(
        zip(
            [i.removeprefix("in/") for i in table.column("id").to_pylist()],
            table.column("_payload").to_pylist(),
            table.column("_read_reason").to_pylist(),
            [m.get("bytes") for m in metas],
        )
    )


def _kept(rows: list) -> list[tuple[str, bytes]]:
    return [(i, p) for i, p, reason, _ in rows if reason is None]


def _rejects(rows: list) -> list[tuple[str, str | None]]:
    return [(reason, span) for _, _, reason, span in rows if reason is not None]


def _sample() -> list[bytes]:
    """The shipped sample crawl's records (one gzip member each)."""
    records, rest = [], (sample_dir() / "web.warc.gz").read_bytes()
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        records.append(inflater.decompress(rest))
        rest = inflater.unused_data
    return records


@pytest.mark.parametrize("layout", ["members", "plain", "one gzip stream"])
def test_the_sample_crawl_reads_as_warcio_reads_it(tmp_path: Path, layout: str) -> None:
    records = _sample()
    plain = b"".join(records)
    data = {
        "members": _file(records, True),
        "plain": plain,
        "one gzip stream": gzip.compress(plain),
    }
    rows = _rows(tmp_path, data[layout], layout != "plain")
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(plain)] and not _rejects(rows)
    assert len(rows) == len(records)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("into", [15, "middle"])
def test_a_file_cut_inside_a_record_keeps_the_records_before(
    tmp_path: Path, gz: bool, into: int | str
) -> None:
    """15 bytes in, the record's headers are cut; further in, its page. One row for the cut,
    whose byte range runs from the record's start to the end of the file."""
    records = [_record(i) for i in range(4)]
    data = _file(records, gz)
    starts = [len(_file(records[:i], gz)) for i in range(5)]
    cut = starts[2] + (into if isinstance(into, int) else (starts[3] - starts[2]) // 2)
    rows = _rows(tmp_path, data[:cut], gz)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(data)][:2]
    [(reason, span)] = _rejects(rows)
    assert reason in ("truncated_record", "truncated_input") and span == f"{starts[2]}-{cut}"


@pytest.mark.parametrize("member", [0, 1, 3])
def test_a_corrupt_gzip_member_loses_the_rest_of_the_file_as_one_row(
    tmp_path: Path, member: int
) -> None:
    records = [_record(i) for i in range(4)]
    data = _file(records, True)
    start = len(_file(records[:member], True))
    at = start + 20  # inside its deflate data
    damaged = data[:at] + bytes(b ^ 0xFF for b in data[at : at + 20]) + data[at + 20 :]
    rows = _rows(tmp_path, damaged, True)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(data)][:member]
    assert _rejects(rows) == [("truncated_input", f"{start}-{len(data)}")]


def test_bytes_after_the_last_member_are_one_row(tmp_path: Path) -> None:
    data = _file([_record(i) for i in range(3)], True)
    rows = _rows(tmp_path, data + b"not gzip at all", True)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(data)]
    assert _rejects(rows) == [("truncated_input", f"{len(data)}-{len(data) + 15}")]


@pytest.mark.parametrize("junk", [b"\x00\x01 not a WARC at all\r\n\r\n", b"<html>stray bytes\n\n"])
def test_bytes_that_are_no_record_are_one_row_to_the_end_of_the_file(
    tmp_path: Path, junk: bytes
) -> None:
    """warcio does not look for a later record: from the junk on, the file is one row."""
    good = b"".join(_record(i) for i in range(3))
    assert _rejects(_rows(tmp_path, junk + good, False)) == [
        ("truncated_input", f"0-{len(junk + good)}")
    ]
    data = _record(0) + junk + good
    rows = _rows(tmp_path, data, False)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(_record(0))]
    assert _rejects(rows) == [("truncated_input", f"{len(_record(0))}-{len(data)}")]


@pytest.mark.parametrize("declared", [1500, 40, -40, -300])
@pytest.mark.parametrize("bad", [1, 3])
def test_a_wrong_content_length_in_a_warc_gz_costs_only_its_record(
    tmp_path: Path, declared: int, bad: int
) -> None:
    """One gzip member per record (how crawlers write WARC.gz): warcio reads each member to its
    end, so the records after a wrong length are read as ever."""
    good = [_record(i) for i in range(5)]
    damaged = [_record(i, declared=declared) if i == bad else good[i] for i in range(5)]
    rows = _rows(tmp_path, _file(damaged, True), True, max_input_bytes=100_000)
    expected = [(r, p) for n, (r, _, p) in enumerate(_warcio(_file(good, True))) if n != bad]
    assert _kept(rows) == expected
    start = len(_file(damaged[:bad], True))
    span = f"{start}-{start + len(_members(damaged)[bad])}"
    reason = "truncated_record" if declared > 0 else "bad_content_length"
    assert _rejects(rows) == [(reason, span)]


@pytest.mark.parametrize("declared", [1500, 40, -40, -300, 10_000_000_000])
def test_a_wrong_content_length_in_a_plain_warc_is_counted_to_the_end_of_the_damage(
    tmp_path: Path, declared: int
) -> None:
    """In a plain WARC warcio reads a record by its length: too long, it swallows what follows
    (the record's reject row spans it); too short, warcio goes on when the rest of the page is
    one line, else the rest of the file is one row. Every byte is a kept record or in a row's
    range, and the records before the damage are kept."""
    good = [_record(i) for i in range(5)]
    damaged = [_record(i, declared=declared) if i == 1 else good[i] for i in range(5)]
    data = b"".join(damaged)
    rows = _rows(tmp_path, data, False, max_input_bytes=100_000)
    whole = [(r, p) for r, _, p in _warcio(b"".join(good))]
    kept = _kept(rows)
    assert kept[0] == whole[0] and whole[1] not in kept and kept == [w for w in whole if w in kept]
    rejects = _rejects(rows)
    assert rejects[0][0] in ("truncated_record", "bad_content_length") and len(rejects) <= 2
    covered = sum(int(b) - int(a) for a, b in (span.split("-") for _, span in rejects))
    lost = [n for n, w in enumerate(whole) if w not in kept]
    assert covered == sum(len(damaged[n]) for n in lost)


def test_a_damaged_warc_type_is_one_malformed_record(tmp_path: Path) -> None:
    records = [_record(i) for i in range(3)]
    records[1] = records[1].replace(b"WARC-Type: response", b"WARC-Type: resp\x01nse")
    rows = _rows(tmp_path, b"".join(records), False)
    assert [i for i, _ in _kept(rows)] == [_uuid(0), _uuid(2)]
    assert _rejects(rows) == [("malformed_record", f"{len(records[0])}-{len(records[0]) * 2}")]


@pytest.mark.parametrize("gz", [False, True])
def test_a_record_over_the_record_limit_is_a_reject_and_the_stream_goes_on(
    tmp_path: Path, gz: bool
) -> None:
    """max_input_bytes 2,000: the record limit is 4,000 (WARC_RECORD_FACTOR 2). A record of
    ~50 KB is read past as record_too_large; one of 3,000 bytes is read and its payload is a
    too_large reject."""
    records = [_record(0), _record(1, body_size=50_000), _record(2, body_size=2_500), _record(3)]
    data = _file(records, gz)
    rows = _rows(tmp_path, data, gz, max_input_bytes=2_000)
    expected = [(r, p) for n, (r, _, p) in enumerate(_warcio(data)) if n in (0, 3)]
    assert _kept(rows) == expected
    assert [(i, r) for i, _, r, _ in rows if r] == [
        (_uuid(1), "record_too_large"),
        (_uuid(2), "too_large"),
    ]


@pytest.mark.parametrize("gz", [False, True])
def test_records_without_an_id_are_named_by_warcios_offsets(tmp_path: Path, gz: bool) -> None:
    """`FILE@OFFSET`; in a WARC.gz the offset is its gzip member's, as warcio (and a CDX index)
    gives it."""
    data = _file([_record(i, with_id=False) for i in range(5)], gz)
    expected = [(f"in.warc{'.gz' if gz else ''}@{o}", p) for _, o, p in _warcio(data)]
    assert _kept(_rows(tmp_path, data, gz)) == expected


@pytest.mark.parametrize("separator", [b"\r\n", b"\n", b"\n\n\r\n\r\n\r\n"])
def test_records_with_loose_separators_read_as_warcio_reads_them(
    tmp_path: Path, separator: bytes
) -> None:
    records = [_record(i).removesuffix(b"\r\n\r\n") + separator for i in range(4)]
    data = b"".join(records)
    rows = _rows(tmp_path, data, False)
    assert _kept(rows) == [(r, p) for r, _, p in _warcio(data)] and not _rejects(rows)
    assert len(rows) == 4


def test_arc_gz_records_are_named_by_warcios_member_offsets(tmp_path: Path) -> None:
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
    path = tmp_path / "in.arc.gz"
    path.write_bytes(data)
    table, stats = read_all(path)
    ids = table.column("id").to_pylist()
    assert ids == [f"in/in.arc.gz@{o}" for o in offsets] and stats["records"] == 4


def test_a_header_bomb_is_one_row_and_never_held(tmp_path: Path) -> None:
    """A record whose header line decompresses to 64 MiB: warcio reads a line whole, so lines
    are cut off at HEADER_LIMIT and the rest of the file is one row."""
    path = tmp_path / "bomb.warc.gz"
    good = gzip.compress(_record(0), mtime=0)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as member:
        member.write(b"WARC/1.0\r\nWARC-Type: response\r\nX-Bomb: ")
        for _ in range(HUGE >> 20):
            member.write(b"a" * (1 << 20))
    path.write_bytes(good + out.getvalue())
    table, stats, peak = _read_peak(path)
    assert table.column("_read_reason").to_pylist() == [None, "truncated_input"]
    assert stats["records"] == 2
    assert peak < HUGE // 4 and HEADER_LIMIT < HUGE // 4, f"held {peak / 1e6:.0f} MB"
