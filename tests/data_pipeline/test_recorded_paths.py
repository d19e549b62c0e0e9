"""A record a run left in its output (a part record, a global stage's map record) names
files of that output only: a crafted one naming an absolute path, `..`, or a link out of the
output is refused in one line by the resume check, which never hashes or opens the path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from data_pipeline import global_parts, parts
from pretrain.errors import ArtifactError
from pretrain.manifest import sha256_file

SHARD = "t-00000"


def _outside(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"not the output's" * 64)
    return secret


def _part_record(out: Path, name: str, target: Path) -> Path:
    """A part record recording `name` with the true size and sha256 of `target`: a check
    that followed the name would find it intact and reuse the part."""
    path = parts.part_record_path(out, SHARD)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"bytes": target.stat().st_size, "sha256": sha256_file(target)}
    path.write_text(json.dumps({"shard": SHARD, "files": {name: entry}}))
    return path


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "link", "linked_dir"])
def test_a_part_record_naming_a_path_outside_the_output_is_refused(tmp_path, kind) -> None:
    out, secret = tmp_path / "out", _outside(tmp_path)
    (out / "data").mkdir(parents=True)
    if kind == "absolute":
        name = str(secret)
    elif kind == "dotdot":
        name = "data/../../elsewhere/secret.bin"
    elif kind == "link":
        name = "data/t-00000.parquet"
        os.symlink(secret, out / name)
    else:  # the shards directory itself a link out of the output
        (out / "data").rmdir()
        os.symlink(secret.parent, out / "data")
        name = "data/secret.bin"
    record = _part_record(out, name, secret)
    with pytest.raises(ArtifactError, match=r"part record .*t-00000.json lists file path"):
        parts.finished_parts(out)
    assert record.exists() and secret.exists()  # nothing deleted either


def test_a_part_record_naming_its_own_files_still_verifies(tmp_path) -> None:
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    shard = out / "data" / f"{SHARD}.parquet"
    shard.write_bytes(b"PAR1 rows PAR1")
    _part_record(out, f"data/{SHARD}.parquet", shard)
    assert parts.finished_parts(out) == {"t-00000"}


def test_a_map_record_naming_a_path_outside_its_stage_is_refused(tmp_path) -> None:
    out, secret = tmp_path / "out", _outside(tmp_path)
    record = global_parts.record_path(out, "dedup", SHARD)
    record.parent.mkdir(parents=True)
    entry = {"bytes": secret.stat().st_size, "sha256": sha256_file(secret)}
    name = "../../../../elsewhere/secret"  # -> <stage>/t-00000.../../../../elsewhere/secret
    record.write_text(json.dumps({"part": SHARD, "rows": 3, "files": {"rows": entry, name: entry}}))
    (record.parent / f"{SHARD}.rows.pq").symlink_to(secret)
    with pytest.raises(ArtifactError, match="map record .* lists file path"):
        global_parts.load(out, "dedup", SHARD, 3, "")
