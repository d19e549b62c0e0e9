"""Real WARC records (the shipped sample crawl, one gzip member per record) and a few hundred
seeded damaged files built from them, read as a worker reads them: never an uncaught exception,
every record the reader saw is a row, the ledger balances, the records before the first damage
are kept byte-equal to warcio's reading, and no document is made up: a row kept that is none of
the undamaged records is a damaged record read as one (a flipped byte inside a page or a header
name: WARC digests are not checked), at most one per damaged record.

Damage, one or two records a file: a record cut short (the next written right after it), a wrong
Content-Length (off by a little or a lot, or landing on a later record), flipped bytes, a damaged
WARC-Type value, junk before a record; in a WARC.gz also flipped bytes inside a member's deflate
data and a member cut short.

Run by hand on other WARC files (e.g. the development corpus): `python -m
tests.data_pipeline.test_warc_fuzz ../shared/corpus/web.warc.gz` prints rows and equality.
"""

from __future__ import annotations

import gzip
import random
import re
import sys
import tempfile
from pathlib import Path

import pytest

from tests.data_pipeline.test_reader_fuzz import _read_and_account
from tests.data_pipeline.test_warc import _rows, _sample, _warcio

SEEDS = 150
_SMALL = [r for r in _sample() if len(r) < 8_000]


def _length(record: bytes, rng: random.Random, at_least: int = 0) -> bytes:
    found = re.search(rb"Content-Length: ([0-9]+)", record)
    assert found is not None
    true = int(found.group(1))
    wrong = rng.choice([true + rng.randint(1, 3_000), max(true - rng.randint(1, 3_000), 0)])
    wrong = max(rng.choice([wrong, true * 1_000 + 7]), at_least)
    return record[: found.start(1)] + str(wrong).encode() + record[found.end(1) :]


def _flip(data: bytes, rng: random.Random, start: int = 0) -> bytes:
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(start, len(damaged))
        damaged[at] ^= rng.randint(1, 255)
    return bytes(damaged)


def _damaged_file(seed: int, gz: bool) -> tuple[bytes, list[bytes], int, set[int]]:
    """(file, its records undamaged, the first damaged record, the damaged ones)."""
    rng = random.Random(seed)
    good = rng.sample(_SMALL, 6)
    damaged = set(rng.sample(range(6), rng.randint(1, 2)))
    ops = ["cut", "length", "flip", "junk", "land", "type"] + (["member", "member_cut"] * gz)
    parts, member_ops = [], {}
    for i, record in enumerate(good):
        op = rng.choice(ops) if i in damaged else None
        if op == "cut":
            record = record[: rng.randrange(1, len(record) - 4)]
        elif op == "length":
            record = _length(record, rng)
        elif op == "land":  # a length past the end of its record, into the next ones
            record = _length(record, rng, at_least=len(record))
        elif op == "flip":
            record = _flip(record, rng)
        elif op == "type":
            value = _flip(b"response", rng).replace(b"\n", b"")
            record = record.replace(b"WARC-Type: response\r\n", b"WARC-Type: " + value + b"\r\n")
        elif op == "junk":
            size = rng.randint(1, 200)
            parts.append(bytes(rng.choice(b"abcdefgh <>/\r\n\t") for _ in range(size)) + b"x")
        elif op in ("member", "member_cut"):
            member_ops[len(parts)] = op
        parts.append(record)
    if gz:
        members = [gzip.compress(p, mtime=0) for p in parts]
        for at, op in member_ops.items():
            if op == "member":
                members[at] = _flip(members[at], rng, start=10)
            else:
                members[at] = members[at][: rng.randrange(10, len(members[at]) - 1)]
        parts = members
    return b"".join(parts), good, min(damaged), damaged


@pytest.mark.parametrize("gz", [False, True])
def test_damaged_files_are_counted_and_keep_the_records_before_the_damage(
    tmp_path: Path, gz: bool
) -> None:
    failures = []
    for seed in range(SEEDS):
        data, good, first, damaged = _damaged_file(seed, gz)
        _read_and_account("x.warc.gz" if gz else "x.warc", data)  # no crash, ledger balanced
        rows = _rows(tmp_path, data, gz, max_input_bytes=100_000)
        whole = [(r, p) for r, _, p in _warcio(b"".join(good))]
        kept = [(i, p) for i, p, reason, _ in rows if reason is None]
        in_order = [k for k in kept if k in whole] == [w for w in whole if w in kept]
        changed = [k for k in kept if k not in whole]  # a damaged record read (its id too)
        if kept[:first] != whole[:first] or not in_order or len(changed) > len(damaged):
            failures.append((seed, len(rows), first, sorted(damaged)))
    assert not failures, failures


def _compare(path: Path) -> None:
    """Rows of `path` against warcio's reading of it (by hand)."""
    data = path.read_bytes()
    gz = path.name.endswith(".gz")
    with tempfile.TemporaryDirectory() as folder:
        rows = _rows(Path(folder), data, gz)
    expected = [(r, p) for r, _, p in _warcio(data)]
    same = [(i, p) for i, p, _, _ in rows] == expected
    print(f"{path}: {len(rows)} rows, warcio {len(expected)} responses, identical: {same}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        _compare(Path(name))
