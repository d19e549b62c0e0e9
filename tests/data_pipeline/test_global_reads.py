"""What the driver reads of a global stage's persisted map side in an object store (moto,
recording every request) when it verifies it before the aggregate (global_parts.loaded): each
part's record, and no map file (one listing gives their sizes and times); a file rewritten
after its record is still read back and found changed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from data_pipeline import global_parts
from pretrain import storage
from tests.data_pipeline.test_driver_reads import _recording, recorded_s3

__all__ = ["recorded_s3"]  # the fixture, used by name
PARTS = {f"a-{i:05d}": 2 for i in range(4)}


def _persisted(out: storage.OutPath) -> None:
    for i, part in enumerate(PARTS):
        texts = [f"doc {i} one", f"doc {i} two"]
        rows = pa.table({"text": texts, "_raw_bytes": pa.array([7, 7], pa.int64())})
        keys = {"keys": pa.table({"key": pa.array([i, i + 1], pa.uint64())})}
        global_parts.persist(out, "first", part, rows, keys, depends="")


def _map_file_requests(log: Path) -> list[str]:
    """HEADs and GETs of a map file (`<part>.<table>.pq`); listings name the folder in
    their query string, not their path."""
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    urls = [e["url"].split("?")[0] for e in entries if e["method"] in ("GET", "HEAD")]
    return [url for url in urls if url.endswith(".pq")]


def test_verifying_the_map_side_reads_no_map_file_back(recorded_s3: Any) -> None:
    """Fails on the old code: each map file was checked with two HEADs and read back whole to
    hash it (here 4 parts x 2 files: 24 requests; at 40 TB a second copy of the corpus)."""
    endpoint, log, out = recorded_s3
    _persisted(out)
    _recording(endpoint, "start-recording")
    reference = [global_parts.load(out, "first", p, n, "") for p, n in PARTS.items()]
    _recording(endpoint, "stop-recording")
    assert len(_map_file_requests(log)) >= 2 * len(PARTS)  # the recorder sees such reads
    log.unlink()
    _recording(endpoint, "start-recording")
    outputs = list(global_parts.loaded(out, "first", PARTS, ""))
    _recording(endpoint, "stop-recording")
    assert _map_file_requests(log) == []
    assert outputs == reference and all(o is not None for o in outputs)


def test_a_map_file_rewritten_after_its_record_is_read_back_and_refused(recorded_s3: Any) -> None:
    """The same size, other bytes, written after the record: its listed time is later, so it is
    hashed and the part's map output does not verify."""
    _, _, out = recorded_s3
    _persisted(out)
    time.sleep(1.1)  # S3 modification times are whole seconds
    target = global_parts.stage_dir(out, "first") / "a-00002.keys.pq"
    data = target.read_bytes()
    target.write_bytes(data[:-12] + bytes(b ^ 1 for b in data[-12:-8]) + data[-8:])
    outputs = list(global_parts.loaded(out, "first", PARTS, ""))
    assert [o is None for o in outputs] == [False, False, True, False]
    stage: Any = _Stage("first")
    assert global_parts.reusable(out, stage, PARTS) == {"a-00000", "a-00001", "a-00003"}


class _Stage:  # what reusable reads of a stage: its name
    def __init__(self, name: str) -> None:
        self.name = name


def test_a_local_map_side_is_checked_as_before(tmp_path: Path) -> None:
    _persisted(tmp_path)
    (global_parts.stage_dir(tmp_path, "first") / "a-00001.keys.pq").unlink()
    outputs = list(global_parts.loaded(tmp_path, "first", PARTS, ""))
    assert [o is None for o in outputs] == [False, True, False, False]
