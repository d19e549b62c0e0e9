"""A manifest whose common fields have the wrong JSON types (hand-edited, damaged) is one line
from `verify` and `show`, sealed again or not: before, a list for `files`, a string for a file
entry or a number for a lineage entry was a Python traceback."""

import json
from pathlib import Path

import pytest

from pretrain.manifest import SEAL, seal_of, write_manifest
from pretrain_app.cli import main

EDITS = {
    "files is a list": lambda m: m.update(files=[1]),
    "files is null": lambda m: m.update(files=None),
    "a file entry is a string": lambda m: m["files"].update({"a.txt": "x"}),
    "a file's bytes is a string": lambda m: m["files"]["a.txt"].update(bytes="5"),
    "a file's bytes is true": lambda m: m["files"]["a.txt"].update(bytes=True),
    "kind is a number": lambda m: m.update(kind=5),
    "inputs is a string": lambda m: m.update(inputs="x"),
    "an input is a number": lambda m: m.update(inputs=[1]),
    "an input's path is a number": lambda m: m["inputs"][0].update(path=5),
    "counts is a list": lambda m: m.update(counts=[1]),
    "command is a number": lambda m: m.update(command=5),
    "command holds a number": lambda m: m.update(command=["pretrain", 5]),
    "git is a number": lambda m: m.update(git=5),
    "created_unix is a string": lambda m: m.update(created_unix="yesterday"),
}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shape")
    parent = root / "parent"
    parent.mkdir()
    (parent / "p.txt").write_text("p")
    write_manifest(parent, "shards")
    art = root / "art"
    art.mkdir()
    (art / "a.txt").write_text("hello")
    write_manifest(art, "tokenizer", inputs=[parent])
    return art


@pytest.mark.parametrize("resealed", [True, False], ids=["resealed", "seal-broken"])
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_manifest_with_wrong_types_is_one_line(artifact, tmp_path, capsys, edit, resealed):
    manifest = json.loads((artifact / "manifest.json").read_text())
    EDITS[edit](manifest)
    if resealed:
        manifest.pop(SEAL)
        manifest[SEAL] = seal_of(manifest)
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "a.txt").write_text("hello")
    (edited / "manifest.json").write_text(json.dumps(manifest))
    for command in ("verify", "show"):
        assert main([command, str(edited)]) == 2, command
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "manifest was edited or damaged" in err, err


def test_a_well_formed_manifest_still_verifies_and_shows(artifact, capsys):
    assert main(["verify", str(artifact)]) == 0
    assert main(["show", str(artifact)]) == 0
