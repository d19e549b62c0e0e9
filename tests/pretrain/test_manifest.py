import json
from pathlib import Path

import pytest

from pretrain.errors import ArtifactError
from pretrain.manifest import manifest_sha256, require, verify, write_manifest
from pretrain_app.cli import main


def _artifact(tmp_path: Path) -> Path:
    art = tmp_path / "art"
    (art / "sub").mkdir(parents=True)
    (art / "a.txt").write_text("hello")
    (art / "sub" / "b.bin").write_bytes(bytes(range(256)))
    write_manifest(art, "shards", config={"x": 1}, counts={"documents": 2})
    return art


def test_manifest_records_every_file_with_hash_and_lineage(tmp_path):
    art = _artifact(tmp_path)
    manifest = verify(art)
    assert set(manifest["files"]) == {"a.txt", "sub/b.bin"}
    assert manifest["files"]["a.txt"]["bytes"] == 5
    child = tmp_path / "child"
    child.mkdir()
    (child / "c.txt").write_text("c")
    child_manifest = write_manifest(child, "tokenizer", inputs=[art])
    assert child_manifest["inputs"][0]["manifest_sha256"] == manifest_sha256(art)
    assert child_manifest["git"].keys() == {"commit", "dirty"}


def test_one_changed_byte_fails_verify_naming_the_file(tmp_path, capsys):
    art = _artifact(tmp_path)
    assert main(["verify", str(art)]) == 0
    data = bytearray((art / "sub" / "b.bin").read_bytes())
    data[100] ^= 1
    (art / "sub" / "b.bin").write_bytes(bytes(data))
    assert main(["verify", str(art)]) == 2
    err = capsys.readouterr().err.strip()
    assert "sub/b.bin" in err and "rebuild" in err
    assert len(err.splitlines()) == 1


def test_missing_file_and_wrong_kind_and_wrong_hash_are_refused(tmp_path):
    art = _artifact(tmp_path)
    with pytest.raises(ArtifactError, match="'tokenizer' artifact"):
        require(art, kind="tokenizer")
    with pytest.raises(ArtifactError, match="expected"):
        require(art, sha256="0" * 64)
    require(art, kind="shards", sha256=manifest_sha256(art))
    (art / "a.txt").unlink()
    with pytest.raises(ArtifactError, match="a.txt is missing"):
        verify(art)


@pytest.mark.parametrize("bad_path", ["../outside.txt", "/etc/passwd", "sub/../../x"])
def test_manifest_path_escaping_the_directory_is_refused(tmp_path, bad_path):
    art = _artifact(tmp_path)
    (tmp_path / "outside.txt").write_text("secret")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"][bad_path] = {"bytes": 6, "sha256": "0" * 64}
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="leaves the artifact directory"):
        verify(art)


def test_symlink_escaping_the_directory_is_refused(tmp_path):
    art = _artifact(tmp_path)
    (tmp_path / "outside.txt").write_text("secret")
    (art / "link.txt").symlink_to(tmp_path / "outside.txt")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"]["link.txt"] = {"bytes": 6, "sha256": "0" * 64}
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="outside"):
        verify(art)


def test_unfinished_artifact_is_refused_with_remedy(tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(ArtifactError, match="not a finished artifact"):
        require(tmp_path / "half")
