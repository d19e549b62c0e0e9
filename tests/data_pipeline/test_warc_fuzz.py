"""Real WARC records (the shipped sample crawl, one gzip member per record) read as warcio reads
them, and a few hundred seeded damaged files built from them: no crash, every undamaged record
kept byte-equal to warcio's reading, and every record counted: a damaged record is one row (kept
or a reject), bytes that are no record one reject, so the rows are the records plus the junk.

Damage, one or two records a file: a record cut short with the next written right after it, a
wrong Content-Length (off by a little or by a lot, or landing on a later record's start or end),
flipped bytes, a damaged WARC-Type value, junk before a record; in a WARC.gz also flipped bytes
inside a member's deflate data and a member cut short. A file's records keep their digests and
HTTP lengths, lose their block digests, or lose all three. About a third of the undamaged records
quote a WARC record in their page (lengths and digests right): they must be kept, not rejected.

Run by hand on other WARC.gz files (e.g. the development corpus): `python -m
tests.data_pipeline.test_warc_fuzz ../shared/corpus/web.warc.gz` prints rows and equality.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
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


def _without(record: bytes, evidence: str) -> bytes:
    """The record without its block digest ("payload": left with its payload digest and HTTP
    length), or without any evidence of its length but its own ("none")."""
    if evidence == "all":
        return record
    head, block = record.split(b"\r\n\r\n", 1)
    head = re.sub(rb"WARC-Block-Digest: [^\r]*\r\n", b"", head)
    if evidence == "none":
        head = re.sub(rb"WARC-Payload-Digest: [^\r]*\r\n", b"", head)
        http, _, body = block.partition(b"\r\n\r\n")
        block = re.sub(rb"(?i)\r\ncontent-length: [0-9]+", b"", http, count=1) + b"\r\n\r\n" + body
        size = len(block) - 4
        head = re.sub(rb"\r\nContent-Length: [0-9]+", b"\r\nContent-Length: %d" % size, head)
    return head + b"\r\n\r\n" + block


_QUOTES = [
    b"<pre>WARC/1.0\r\nWARC-Type: response\r\nContent-Length: %d\r\n\r\nHTTP/1.1 200 OK</pre>",
    b"<code>WARC/1.0\nWARC-Type: resource\nWARC-Record-ID: <urn:uuid:q>\nContent-Length: %d\n\n",
    b"\n<pre>\nWARC/1.1\nWARC-Type: response\nContent-Length: %d\n\nHTTP/1.1 200 OK\n\nhi</pre>\n",
]


def _quoting(record: bytes, rng: random.Random) -> bytes:
    """The record with a WARC record quoted in its page (as a page documenting the format has
    one), its lengths and digests made right again: still a good record."""
    head, block = record.split(b"\r\n\r\n", 1)
    block = block.removesuffix(b"\r\n\r\n")
    http, body = block.split(b"\r\n\r\n", 1)
    at = rng.randrange(len(body) + 1)
    body = body[:at] + rng.choice(_QUOTES) % rng.randint(0, 20_000) + body[at:]
    http = re.sub(rb"(?i)\r\ncontent-length: [0-9]+", b"\r\nContent-Length: %d" % len(body), http)
    block = http + b"\r\n\r\n" + body
    digests = ((b"Block", block), (b"Payload", body))
    for name, data in digests:
        value = base64.b32encode(hashlib.sha1(data).digest())
        head = re.sub(
            rb"WARC-%s-Digest: sha1:[A-Z0-9]+" % name,
            b"WARC-%s-Digest: sha1:%s" % (name, value),
            head,
        )
    head = re.sub(rb"\r\nContent-Length: [0-9]+", b"\r\nContent-Length: %d" % len(block), head)
    return head + b"\r\n\r\n" + block + b"\r\n\r\n"


def _land(parts: list[bytes], at: int, rng: random.Random) -> bytes:
    """parts[at] with a Content-Length that ends at a later part's start, or at its end before
    the blank line that follows it (a length no digest-less check of the blank line alone sees)."""
    head, block = parts[at].split(b"\r\n\r\n", 1)
    target = rng.randrange(at + 1, len(parts) + 1)
    length = len(block) - 4 + 4 + sum(len(p) for p in parts[at + 1 : target])
    length -= 4 if rng.random() < 0.5 and target > at + 1 else 0
    head = re.sub(rb"\r\nContent-Length: [0-9]+", b"\r\nContent-Length: %d" % length, head)
    return head + b"\r\n\r\n" + block


def _damaged_file(seed: int, gz: bool) -> tuple[bytes, list[bytes], set[int], range]:
    """(file, its records undamaged, indexes damaged, how many rows it may read as). A damaged
    record is one row (a member cut in its trailer: two); junk is one row, or none in a plain WARC
    after a damaged record (inside that record's reject, when its damage shows). A file's records
    keep all their evidence of their lengths, lose their block digests, or lose all of it. The
    records after one whose length lands on a later record are not damaged: with no evidence
    left, a second wrong length inside the first one's block hides it (known, README)."""
    rng = random.Random(seed)
    evidence = rng.choice(["all", "payload", "none"])
    plain = [_without(r, evidence) for r in rng.sample(_SMALL, 6)]
    quotes = random.Random(-seed)  # its own, so each seed damages its file as before
    good = [_quoting(r, quotes) if quotes.random() < 0.3 else r for r in plain]
    damaged = set(rng.sample(range(6), rng.randint(1, 2)))
    ops = ["cut", "length", "flip", "junk", "land", "type"]
    ops += ["member", "member_cut"] if gz else []
    parts, junk, junk_maybe, landing, member_ops = [], 0, 0, [], {}
    for i, record in enumerate(good):
        op = rng.choice(ops) if i in damaged else None
        if op is not None and landing:  # see below
            damaged.discard(i)
            op = None
        if op not in (None, "junk"):  # a damaged record quotes none: its reject may split there
            record = plain[i]
        if op == "cut":
            record = record[: rng.randrange(1, len(record) - 4)]
        elif op == "length":
            record = _length(record, rng)
        elif op == "flip":
            record = _flip(record, rng)
        elif op == "type":  # the WARC-Type value damaged: any value none of WARC's
            value = _flip(b"response", rng)
            record = record.replace(_TYPE, b"WARC-Type: " + value.replace(b"\n", b"") + b"\r\n")
        elif op == "land":
            landing.append(len(parts))
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
        if op in ("member", "member_cut"):
            member_ops[len(parts)] = op
            junk_maybe += op == "member_cut"
        parts.append(record)
    for at in landing:  # once the parts after it are known
        parts[at] = _land(parts, at, rng)
    if gz:
        members = [gzip.compress(p, mtime=0) for p in parts]
        for at, op in member_ops.items():
            if op == "member":
                members[at] = _flip(members[at], rng, start=10)
            else:  # cut in its 8-byte trailer: whole record, then the cut's reject
                members[at] = members[at][: rng.randrange(10, len(members[at]) - 1)]
        parts = members
    low = len(good) + junk
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
