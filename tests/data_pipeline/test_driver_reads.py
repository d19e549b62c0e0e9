"""What the driver reads of an output in an object store (a real S3-compatible server, moto,
recording every request it serves): the resume scan and the manifest trust the digests the
workers recorded when they wrote each file, so no shard's bytes are read back (at 40 TB that is
reading the whole output again), and a shard rewritten after its part was recorded is still
caught. benchmarks/bench_driver_scale.py measures the cost per part."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from data_pipeline import parts
from pretrain import shards_layout as layout
from pretrain import storage
from pretrain.manifest import write_manifest
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

SHARDS = [f"web-{i:05d}" for i in range(3)]


@pytest.fixture
def recorded_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Path, storage.ObjectPath]]:
    """A moto server that records the requests it serves into a file: (endpoint, that file, an
    output prefix of this test's own: the filesystem of a URI is cached per process)."""
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(log))
    with moto_server() as endpoint:
        for key, value in s3_env(endpoint).items():
            monkeypatch.setenv(key, value)
        s3_filesystem(endpoint).create_dir("out")
        out = storage.output_path(f"s3://out/{tmp_path.name}")
        assert isinstance(out, storage.ObjectPath)
        yield endpoint, log, out


def _recording(endpoint: str, action: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/recorder/{action}"))


def _shard_reads(log: Path) -> list[str]:
    """The requests (HEAD or GET) of a shard or rejects object; listings name the folder in
    their query string, not in their path."""
    if not log.is_file():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    folders = (f"/{layout.DATA_DIR}/", f"/{layout.REJECTS_DIR}/")
    return [
        entry["url"]
        for entry in entries
        if entry["method"] in ("GET", "HEAD")
        and any(folder in entry["url"].split("?")[0] for folder in folders)
    ]


def _finished_output(out: storage.ObjectPath) -> None:
    """Three finished parts as the merge leaves them: shard, rejects, then the fragment."""
    for i, shard in enumerate(SHARDS):
        table = pa.table({"text": [f"document {i} {j}" for j in range(5)]})
        files = {
            name: parts.write_parquet(table, out, name, 3)
            for name in (layout.data_file(shard), layout.rejects_file(shard))
        }
        storage.write_json(parts.part_record_path(out, shard), {"shard": shard, "files": files})


def test_resume_scan_and_manifest_read_no_shard_bytes_back(recorded_s3: Any) -> None:
    """Fails on the old code: it sent a HEAD per file and read every shard back to hash it."""
    endpoint, log, out = recorded_s3
    _finished_output(out)
    hashed = write_manifest(out, "shards")["files"]  # every object read back: the reference
    _recording(endpoint, "start-recording")
    assert parts.finished_parts(out) == {"web-00000", "web-00001", "web-00002"}
    known = {}
    for shard in SHARDS:
        known.update(parts.load_json(parts.part_record_path(out, shard))["files"])
    manifest = write_manifest(out, "shards", known=known)
    _recording(endpoint, "stop-recording")
    assert manifest["files"] == hashed
    assert _shard_reads(log) == []


def test_a_shard_rewritten_after_its_part_was_recorded_is_recomputed(recorded_s3: Any) -> None:
    """The same size, other bytes, written after the fragment: read back, found changed."""
    _, _, out = recorded_s3
    _finished_output(out)
    time.sleep(1.1)  # S3 modification times are whole seconds
    shard = out / layout.data_file(SHARDS[1])
    data = shard.read_bytes()
    shard.write_bytes(data[:-5] + bytes(b ^ 1 for b in data[-5:]))
    assert parts.finished_parts(out) == {"web-00000", "web-00002"}
    assert not shard.exists()  # forgotten: computed again by the run


def test_a_recorded_digest_of_another_size_is_not_trusted(tmp_path: Path) -> None:
    """A file whose size is not the one its writer recorded is hashed by the manifest."""
    (tmp_path / "a.bin").write_bytes(b"abc")
    reference = write_manifest(tmp_path, "shards")["files"]
    known = {"a.bin": {"bytes": 4, "sha256": "0" * 64}}
    assert write_manifest(tmp_path, "shards", known=known)["files"] == reference
