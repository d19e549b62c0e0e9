"""A local input changed in place cannot pass as unchanged on resume: a same-size edit in the
middle of a file larger than FULL_HASH_BYTES (outside the hashed edges) with its mtime restored
is an identity change (the file's ctime moved), and reading a file is not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs as pafs

from data_pipeline import fingerprint
from data_pipeline.fingerprint import FULL_HASH_BYTES, changed_inputs, input_identities
from data_pipeline.formats import InputFile
from pretrain.errors import InputError


def _input(path: Path) -> InputFile:
    return InputFile(path=str(path), format="jsonl", stem=path.stem)


def _big(path: Path) -> Path:
    line = b'{"text": "' + b"the mill by the river " * 40 + b'"}\n'
    path.write_bytes(line * (2 * FULL_HASH_BYTES // len(line)))
    return path


def test_a_middle_byte_flipped_with_mtime_restored_is_a_changed_input(tmp_path):
    big = _big(tmp_path / "big.jsonl")
    inputs = [_input(big)]
    recorded = input_identities(inputs)
    before = big.stat()
    with open(big, "r+b") as handle:  # in place, like a bad disk block or an editor's save
        handle.seek(before.st_size // 2)
        handle.write(b"M")
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = big.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert changed_inputs(recorded, input_identities(inputs)) == ["big"]


def test_a_file_replaced_by_a_same_size_copy_with_its_mtime_is_a_changed_input(tmp_path):
    big = _big(tmp_path / "big.jsonl")
    inputs = [_input(big)]
    recorded = input_identities(inputs)
    data = bytearray(big.read_bytes())
    data[len(data) // 2] ^= 1
    other = tmp_path / "other.jsonl"
    other.write_bytes(bytes(data))
    before = big.stat()
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, big)  # `cp -p` to a temp name, then a rename: a new inode
    assert changed_inputs(recorded, input_identities(inputs)) == ["big"]


def test_reading_an_input_leaves_it_unchanged(tmp_path):
    big, small = _big(tmp_path / "big.jsonl"), tmp_path / "small.jsonl"
    small.write_text('{"text": "one document"}\n')
    inputs = [_input(big), _input(small)]
    recorded = input_identities(inputs)
    big.read_bytes(), small.read_bytes()
    assert changed_inputs(recorded, input_identities(inputs)) == []


class _CountedLocal:
    """The local filesystem, counting the stats it is asked for (fingerprint uses two calls)."""

    def __init__(self, counts: list[str]) -> None:
        self.local, self.counts = pafs.LocalFileSystem(), counts

    def get_file_info(self, path: str) -> pafs.FileInfo:
        self.counts.append(path)
        return self.local.get_file_info(path)

    def open_input_file(self, path: str) -> Any:
        return self.local.open_input_file(path)


def _reference(path: Path) -> dict[str, Any]:
    """The identity as the old code built it: pyarrow's size and mtime, os.stat's inode and ctime."""
    info, stat = pafs.LocalFileSystem().get_file_info(str(path)), os.stat(path)
    return {
        "size": info.size,
        "mtime_ns": info.mtime_ns,
        "inode": stat.st_ino,
        "ctime_ns": stat.st_ctime_ns,
    }


def test_a_local_input_is_stat_once_for_the_same_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Size, mtime, inode and ctime from one os.stat, equal to what pyarrow's file info and a
    second os.stat gave (fails on the old code: two stats per input)."""
    big, small = _big(tmp_path / "big.jsonl"), tmp_path / "small.jsonl"
    small.write_text('{"text": "one document"}\n')
    expected = {p.stem: _reference(p) for p in (big, small)}
    counts: list[str] = []
    monkeypatch.setattr(fingerprint, "filesystem_for", lambda path: (_CountedLocal(counts), path))
    real_stat = os.stat

    def counted_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        counts.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted_stat)
    found = input_identities([_input(big), _input(small)])
    monkeypatch.undo()
    assert sorted(counts) == sorted([str(big), str(small)])
    for stem, identity in found.items():
        assert {k: identity[k] for k in expected[stem]} == expected[stem]
    assert found == expected  # no byte of a local input is read


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_an_input_that_is_no_file_is_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "in.jsonl"
    if kind == "folder":
        path.mkdir()
    with pytest.raises(InputError, match=r"input .*in\.jsonl: cannot be read"):
        fingerprint.file_identity(_input(path))
