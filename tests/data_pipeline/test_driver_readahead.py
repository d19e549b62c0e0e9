"""The driver reads an object-store output's per-part records (part records, read records)
several at a time and consumes them in order: the resume scan, the ledger and the
manifest's throughput come out the same as read one by one, and a missing fragment is the same
one-line error. The store is moto with a real store's round-trip latency, counting the requests
it holds at once (tests/data_pipeline/moto_latency.py): read one by one, that is 1.
benchmarks/bench_driver_scale.py (`--s3-delay-ms`) measures what it saves."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from data_pipeline import ledger, parts, runner
from pretrain import shards_layout as layout
from pretrain import storage
from pretrain.errors import PretrainError
from tests.data_pipeline.moto_latency import in_flight, latency_server
from tests.data_pipeline.s3tools import s3_env, s3_filesystem

STEMS = ["crawl-a", "crawl-b", "crawl-c"]
PER_INPUT = 6
ROW = {"stage": "pass", "reason": "pass", "lang": "en", "outcome": "kept"}


@pytest.fixture(scope="module")
def slow_store() -> Iterator[tuple[str, storage.ObjectPath]]:
    """A finished output in a moto server that answers each request after 20 ms, like a store
    across a network (written without the delay)."""
    saved = dict(os.environ)
    try:
        with latency_server(0) as endpoint:
            os.environ.update(s3_env(endpoint))
            s3_filesystem(endpoint).create_dir("readahead")
            out = storage.output_path(f"s3://readahead/{os.getpid()}")
            assert isinstance(out, storage.ObjectPath)
            _finished_output(out)
            in_flight(endpoint, delay_ms=20)
            yield endpoint, out
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def removed(path: storage.ObjectPath) -> Iterator[None]:
    """`path` deleted for the block's duration (the output is the module's)."""
    data = path.read_bytes()
    path.unlink()
    try:
        yield
    finally:
        path.write_bytes(data)


def _finished_output(out: storage.ObjectPath) -> None:
    """Every input's read record; per part its shard, rejects and fragment."""
    for s, stem in enumerate(STEMS):
        for number in range(PER_INPUT):
            shard = f"{stem}-{number:05d}"
            table = pa.table({"text": [f"document {stem} {number} {j}" for j in range(3)]})
            files = {
                name: parts.write_parquet(table, out, name, 3)
                for name in (layout.data_file(shard), layout.rejects_file(shard))
            }
            row = {**ROW, "domain": f"d{number % 3}", "documents": 3, "bytes": 30 + s}
            fragment = {"shard": shard, "files": files, "rows": [{**row, "text_bytes": 20}]}
            storage.write_json(parts.part_record_path(out, shard), {**fragment, "flags": {}})
        record = {"records": 3 * PER_INPUT, "bytes": (30 + s) * PER_INPUT, "parts": PER_INPUT}
        storage.write_json(parts.read_stats_path(out, stem), record)


def _driver_reads(out: storage.ObjectPath) -> dict[str, Any]:
    """What the driver computes from the records: resume scan, ledger (+ digests)."""
    merged = ledger.Merged()  # nothing handed over: every record is read
    done = parts.finished_parts(out)
    led, shards = runner._collect(out, STEMS, [], merged)
    return {"done": done, "ledger": led, "shards": shards, "known": merged.known}


def test_read_ahead_gives_the_driver_the_same_results_as_reading_in_turn(
    slow_store: tuple[str, storage.ObjectPath], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails on the old code: it held one request at a time (max 1)."""
    endpoint, output = slow_store
    in_flight(endpoint)
    ours = _driver_reads(output)
    counted = in_flight(endpoint)
    with monkeypatch.context() as serial:
        serial.setattr(parts, "READ_AHEAD", 1)
        in_flight(endpoint)
        reference = _driver_reads(output)
        one_by_one = in_flight(endpoint)
    assert one_by_one["max"] == 1
    assert counted["max"] > 1, counted
    assert counted["max"] <= parts.READ_AHEAD + 1  # bounded (+1: a listing page)
    assert ours["done"] == {f"{stem}-{p:05d}" for stem in STEMS for p in range(PER_INPUT)}
    assert json.dumps(ours, default=sorted) == json.dumps(reference, default=sorted)
    assert ours["ledger"]["parts"] == len(STEMS) * PER_INPUT
    assert ours["ledger"]["conservation"]["balanced"]


def test_a_missing_fragment_is_the_first_one_in_part_order(
    slow_store: tuple[str, storage.ObjectPath],
) -> None:
    """Two fragments gone: the error names the earlier part, as read one by one (the ones read
    ahead of it are dropped)."""
    _, output = slow_store
    first, later = (parts.part_record_path(output, s) for s in ("crawl-b-00004", "crawl-c-00001"))
    missing = pytest.raises(PretrainError, match=r"^shard crawl-b-00004 was not written")
    with removed(later), removed(first), missing:
        runner._collect(output, STEMS, [], ledger.Merged())


def test_a_missing_read_record_is_a_one_line_error(
    slow_store: tuple[str, storage.ObjectPath],
) -> None:
    _, output = slow_store
    missing = pytest.raises(PretrainError, match=r"^input crawl-b: no read record")
    with removed(parts.read_stats_path(output, "crawl-b")), missing:
        runner._collect(output, STEMS, [], ledger.Merged())


def test_read_ahead_keeps_order_and_the_first_error() -> None:
    """The helper alone: results in item order whatever order the reads finish in; the first
    failing item's error, as in turn."""
    import time

    def read(i: int) -> int:
        time.sleep(0.001 * (i % 5))  # later items finish first
        if i in (37, 50):
            raise ValueError(f"item {i}")
        return i * i

    assert list(parts.ordered(read, range(30), 8)) == [i * i for i in range(30)]
    with pytest.raises(ValueError, match="item 37"):
        list(parts.ordered(read, range(100), 8))


def test_the_progress_count_reads_the_read_records_ahead(
    slow_store: tuple[str, storage.ObjectPath],
) -> None:
    """`parts.records_to_read` (what the stream's progress bar polls) reads every input's read
    record several at a time, one read each (pyarrow's HEAD + GET, no `is_file` HEAD first),
    and counts the same rows as one by one. Fails on the old code: one request at a time (max
    1) and 3 per input."""
    endpoint, output = slow_store
    stems = STEMS * 8  # 24 reads: enough to overlap
    skip = {"crawl-b-00000", "crawl-b-00005"}
    in_flight(endpoint)
    rows = parts.records_to_read(output, stems, skip, 3)
    counted = in_flight(endpoint)
    assert rows == 8 * (3 * 3 * PER_INPUT - 2 * 3)
    assert 1 < counted["max"] <= parts.READ_AHEAD, counted
    assert counted["served"] == 2 * len(stems), counted
    with removed(parts.read_stats_path(output, "crawl-c")):
        assert parts.records_to_read(output, stems, skip, 3) is None  # not every input read yet
