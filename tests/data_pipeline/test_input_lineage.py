"""The job's lineage (the artifact folders its local inputs lie in) costs a look at each folder
once, not one per parent folder of every input: a million inputs in a few folders of a deep tree
was tens of millions of stats in the driver before a run started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from data_pipeline.fingerprint import input_artifacts
from data_pipeline.formats import InputFile


def _reference(files: list[InputFile]) -> list[str]:
    """What the old code answered: for each file, the nearest parent of its resolved path that
    holds a manifest.json."""
    dirs: list[str] = []
    for item in files:
        for parent in Path(item.path).resolve().parents:
            if (parent / "manifest.json").is_file():
                if str(parent) not in dirs:
                    dirs.append(str(parent))
                break
    return dirs


def _tree(root: Path) -> list[InputFile]:
    """Two artifacts (one nested in a plain folder), a folder in none, a linked file, a URI."""
    files = []
    for folder, manifest in (("a/b/shards", "a/b/shards"), ("c/d/e/f", "c/d"), ("plain/x", None)):
        (root / folder).mkdir(parents=True)
        if manifest:
            (root / manifest / "manifest.json").write_text("{}")
        for i in range(30):
            path = root / folder / f"part-{i}.jsonl"
            path.write_text('{"text": "x"}\n')
            files.append(InputFile(path=str(path), format="jsonl", stem=f"{folder}-{i}"))
    link = root / "plain" / "linked.jsonl"
    link.symlink_to(root / "a/b/shards/part-0.jsonl")
    files.append(InputFile(path=str(link), format="jsonl", stem="linked"))
    files.append(InputFile(path="s3://bucket/in/x.jsonl", format="jsonl", stem="remote"))
    return files


def test_lineage_is_the_same_from_one_look_at_each_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails on the old code (a manifest look for every parent of every file: 91 files x their
    depth)."""
    files = _tree(tmp_path)
    expected = _reference(files)
    assert expected == [str(tmp_path / "a/b/shards"), str(tmp_path / "c/d")]
    looks: list[str] = []
    is_file = Path.is_file

    def counted(self: Path, *args: object, **kwargs: object) -> bool:
        looks.append(str(self))
        return is_file(self, *args, **kwargs)

    monkeypatch.setattr(Path, "is_file", counted)
    found = input_artifacts(files)
    monkeypatch.undo()
    assert found == expected
    assert len(looks) == len(set(looks)), "a folder was looked at twice"
    depth = len(tmp_path.parts)
    assert len(looks) <= 3 * (depth + 4), len(looks)


def test_a_relative_input_path_has_the_same_lineage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _tree(tmp_path)
    monkeypatch.chdir(tmp_path / "a")
    relative = [InputFile(os.path.relpath(f.path), f.format, f.stem) for f in files[:31]]
    relative.append(InputFile("manifest-less.jsonl", "jsonl", "here"))
    expected = [str(tmp_path / "a/b/shards"), str(tmp_path / "c/d")]
    assert input_artifacts(relative) == _reference(relative) == expected
