"""pretrain.storage: the object-store paths the data job writes through. Here over pyarrow's own
LocalFileSystem (same calls as S3FileSystem, no rename used); the S3 server tests are in
tests/data_pipeline/test_runner_cluster_s3_out.py."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from pretrain import storage
from pretrain.errors import ConfigError
from pretrain.manifest import load_manifest, write_manifest


def _store(root: Path) -> storage.ObjectPath:
    return storage.ObjectPath(pafs.LocalFileSystem(), str(root), "")


def test_local_outputs_stay_paths_and_uris_become_object_paths(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # else pyarrow asks AWS for the bucket's region
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never contacted
    assert storage.output_path(tmp_path) == tmp_path
    assert storage.output_path(f"file://{tmp_path}") == tmp_path
    s3 = storage.output_path("s3://bucket/runs/one/")
    assert isinstance(s3, storage.ObjectPath) and str(s3) == "s3://bucket/runs/one"
    assert str(s3 / "shards" / "x.parquet") == "s3://bucket/runs/one/shards/x.parquet"
    assert (s3 / "shards" / "x.parquet").stem == "x" and s3.name == "one"
    assert pickle.loads(pickle.dumps(s3)) == s3  # travels to Ray workers by its URI
    with pytest.raises(ConfigError, match="not a filesystem URI"):
        storage.output_path("nosuch://bucket/x")


def test_an_s3_output_is_locked_in_the_store_other_uris_through_a_local_stand_in(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("PRETRAIN_CACHE", str(tmp_path / "cache"))
    assert storage.lock_target("s3://bucket/runs/one") == "s3://bucket/runs/one"
    target = Path(storage.lock_target("gs://bucket/runs/one"))
    assert target.is_relative_to(tmp_path / "cache")
    assert target != Path(storage.lock_target("gs://bucket/runs/two"))
    assert storage.lock_target(tmp_path / "out") == tmp_path / "out"


def test_object_paths_list_write_hash_and_remove(tmp_path) -> None:
    root = _store(tmp_path / "out")
    (tmp_path / "out").mkdir()
    storage.write_json(root / ".parts" / "a-00000.json", {"x": 1})
    storage.write_atomic(root / ".parts" / "pieces" / "a-00000" / "0-3.parquet", b"piece")
    storage.write_atomic(root / "shards" / "a-00000.parquet", b"shard")
    assert [p.name for p in (root / ".parts").glob("*.json")] == ["a-00000.json"]
    assert [p.name for p in (root / ".parts").iterdir()] == ["a-00000.json", "pieces"]
    assert (root / ".parts" / "pieces").is_dir() and not (root / "nothing").exists()
    assert (root / "shards" / "a-00000.parquet").stat().st_size == 5
    assert (
        storage.size_and_sha256(root / "shards" / "a-00000.parquet")[1]
        == hashlib.sha256(b"shard").hexdigest()
    )
    assert (root / ".parts" / "a-00000.json").read_text() == '{\n  "x": 1\n}'
    storage.remove_tree(root / ".parts" / "pieces")
    assert not (root / ".parts" / "pieces").exists()
    (root / "shards" / "a-00000.parquet").unlink()
    (root / "shards" / "a-00000.parquet").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        (root / "shards" / "a-00000.parquet").read_bytes()


def test_a_manifest_of_an_object_prefix_lists_every_object(tmp_path) -> None:
    (tmp_path / "out").mkdir()
    root = _store(tmp_path / "out")
    storage.write_atomic(root / "shards" / "a.parquet", b"rows")
    storage.write_json(root / "ledger.json", {"documents_in": 1})
    manifest = write_manifest(root, "shards")
    assert set(manifest["files"]) == {"shards/a.parquet", "ledger.json"}
    assert manifest["files"]["shards/a.parquet"]["sha256"] == hashlib.sha256(b"rows").hexdigest()
    assert load_manifest(tmp_path / "out")["files"] == manifest["files"]


def test_remove_tree_removes_a_linked_directory_as_a_link_never_its_target(tmp_path) -> None:
    """A directory of the output that is a link to elsewhere: the link goes, what it points at
    stays (rmtree refuses a link, and its error was ignored: the link stayed, silently)."""
    target = tmp_path / "elsewhere"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "keep.bin").write_bytes(b"not the output's")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cache").symlink_to(target)
    storage.remove_tree(out / "cache")
    assert not (out / "cache").is_symlink() and not (out / "cache").exists()
    assert (target / "sub" / "keep.bin").read_bytes() == b"not the output's"
    real = out / "real"
    (real / "deep").mkdir(parents=True)
    (real / "deep" / "link").symlink_to(target)  # a link inside: removed, not followed
    storage.remove_tree(real)
    assert not real.exists() and (target / "sub" / "keep.bin").exists()
