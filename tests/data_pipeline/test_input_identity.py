"""A local input changed in place cannot pass as unchanged on resume: a same-size edit in the
middle of a file larger than FULL_HASH_BYTES (outside the hashed edges) with its mtime restored
is an identity change (the file's ctime moved), and reading a file is not."""

from __future__ import annotations

import os
from pathlib import Path

from data_pipeline.fingerprint import FULL_HASH_BYTES, changed_inputs, input_identities
from data_pipeline.formats import InputFile


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
