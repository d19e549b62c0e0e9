"""Real WARC records (the shipped sample crawl, one gzip member per record) read as warcio reads
them, and a few hundred seeded damaged files built from them: no crash, every undamaged record
kept byte-equal to warcio's reading, and every record counted: a damaged record is one row (kept
or a reject), bytes that are no record one reject, so the rows are the records plus the junk.

Damage, one or two records a file: a record cut short with the next written right after it, a
wrong Content-Length (off by a little or by a lot), flipped bytes, junk before a record; in a
WARC.gz also flipped bytes inside a member's deflate data and a member cut short.

Run by hand on other WARC.gz files (e.g. the development corpus): `python -m
tests.data_pipeline.test_warc_fuzz ../shared/corpus/web.warc.gz` prints rows and equality.
"""

from __future__ import annotations

import gzip
import random
import re
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from pretrain.sample import sample_dir
from tests.data_pipeline.test_warc_framing import _rows, _warcio

SEEDS = 300
_TYPE = b"WARC-Type: response\r\n"


def members(data: bytes) -> list[bytes]:
    """The decoded gzip members of a WARC.gz: one record each."""
    records, rest = [], data
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        records.append(inflater.decompress(rest))
        rest = inflater.unused_data
    return records


_SAMPLE = members((sample_dir() / "web.warc.gz").read_bytes())
_SMALL = [r for r in _SAMPLE if len(r) < 8_000]


def _length(record: bytes, rng: random.Random) -> bytes:
    found = re.search(rb"Content-Length: ([0-9]+)", record)
    assert found is not None
    true = int(found.group(1))
    wrong = rng.choice([true + rng.randint(1, 3_000), max(true - rng.randint(1, 3_000), 0)])
    wrong = rng.choice([wrong, true * 1_000 + 7])
    return record[: found.start(1)] + str(wrong).encode() + record[found.end(1) :]


def _flip(data: bytes, rng: random.Random, start: int = 0) -> bytes:
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(start, len(damaged))
        damaged[at] ^= rng.randint(1, 255)
    return bytes(damaged)


def _damaged_file(seed: int, gz: bool) -> tuple[bytes, list[bytes], set[int], range]:
    """(file, its records undamaged, indexes damaged, how many rows it may read as). A damaged
    record is one row (a member cut in its trailer: two), or none when its damage changed WARC-Type
    away from `response` (a type that is not read); junk is one row, or none in a plain WARC after a damaged record (inside
    that record's reject, when its damage shows)."""
    rng = random.Random(seed)
    good = rng.sample(_SMALL, 6)
    damaged = set(rng.sample(range(6), rng.randint(1, 2)))
    ops = ["cut", "length", "flip", "junk"] + (["member", "member_cut"] if gz else [])
    parts, junk, junk_maybe, may_vanish = [], 0, 0, set()
    for i, record in enumerate(good):
        op = rng.choice(ops) if i in damaged else None
        if op == "cut":
            record = record[: rng.randrange(1, len(record) - 4)]
        elif op == "length":
            record = _length(record, rng)
        elif op == "flip":
            record = _flip(record, rng)
        elif op == "junk":
            size = rng.randint(1, 200)
            parts.append(bytes(rng.choice(b"abcdefgh <>/\r\n\t") for _ in range(size)) + b"x")
            if not gz:
                parts[-1] = parts[-1].lstrip(b"\r\n")
            if not gz and i - 1 in damaged:
                junk_maybe += 1
            else:
                junk += 1
            damaged.discard(i)
        if _TYPE not in record:
            may_vanish.add(i)
        member = gzip.compress(record, mtime=0) if gz else record
        if op == "member":
            member = _flip(member, rng, start=10)
        elif op == "member_cut":  # cut in its 8-byte trailer: whole record, then the cut's reject
            member = member[: rng.randrange(10, len(member) - 1)]
            junk_maybe += 1
        parts.append(member)
    if gz:
        parts = [p if p.startswith(b"\x1f\x8b") else gzip.compress(p, mtime=0) for p in parts]
    low = len(good) + junk - len(may_vanish & damaged)
    return b"".join(parts), good, damaged, range(low, len(good) + junk + junk_maybe + 1)


def _file(records: list[bytes], gz: bool) -> bytes:
    return b"".join(gzip.compress(r, mtime=0) for r in records) if gz else b"".join(records)


@pytest.mark.parametrize("gz", [False, True])
def test_the_sample_crawl_reads_as_warcio_reads_it(tmp_path: Path, gz: bool) -> None:
    data = _file(_SAMPLE, gz)
    rows = _rows(tmp_path, data, gz)
    expected = [(r, p) for r, _, p in _warcio(data)]
    assert [(i, p) for i, p, reason in rows] == expected and len(expected) == len(_SAMPLE)


@pytest.mark.parametrize("gz", [False, True])
def test_damaged_files_lose_no_record(tmp_path: Path, gz: bool) -> None:
    failures = []
    for seed in range(SEEDS // 2):
        data, good, damaged, counts = _damaged_file(seed, gz)
        rows = _rows(tmp_path, data, gz, max_input_bytes=100_000)
        whole = [(r, p) for r, _, p in _warcio(_file(good, gz))]
        kept = [(i, p) for i, p, reason in rows if reason is None]
        undamaged = [w for n, w in enumerate(whole) if n not in damaged]
        # Every undamaged record is kept as warcio reads it, in order; a damaged one may be kept
        # (a flipped byte inside a page changes it undetected: WARC digests are not checked).
        kept_undamaged = [k for k in kept if k in undamaged]
        if kept_undamaged != undamaged or len(rows) not in counts:
            failures.append((seed, len(rows), counts, sorted(damaged)))
    assert not failures, failures


def _compare(path: Path) -> None:
    """Rows of `path` against warcio's reading of it (by hand)."""
    data = path.read_bytes()
    gz = path.name.endswith(".gz")
    with tempfile.TemporaryDirectory() as folder:
        rows = _rows(Path(folder), data, gz)
    expected = [(r, p) for r, _, p in _warcio(data)]
    same = [(i, p) for i, p, _ in rows] == expected
    print(f"{path}: {len(rows)} rows, warcio {len(expected)} responses, identical: {same}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        _compare(Path(name))
