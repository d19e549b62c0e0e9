"""What a later global stage's persisted map output depends on (global_parts.digest): the bytes of
the earlier stage's map output of every part, taken from the records `load` has just verified,
not by hashing the whole map side in the driver again."""

from __future__ import annotations

import hashlib

import pyarrow as pa

from data_pipeline import global_parts
from pretrain.storage import output_path


def _rows(texts: list[str]) -> pa.Table:
    return pa.table({"text": texts, "_raw_bytes": pa.array([len(t) for t in texts], pa.int64())})


def _persist(out, part: str, texts: list[str], keys: list[int]) -> None:
    tables = {"keys": pa.table({"key": pa.array(keys, pa.uint64())})}
    global_parts.persist(out, "first", part, _rows(texts), tables, depends="")


def _loaded(out) -> list:
    outputs = [global_parts.load(out, "first", p, 2, "") for p in ("a-00000", "a-00001")]
    assert all(o is not None for o in outputs)
    return outputs


def _hashed_files(out, outputs) -> str:
    """The same digest from the files' bytes themselves (what it stands for)."""
    hasher = hashlib.sha256(b"")
    for o in outputs:
        for path in (o.rows, *o.files.values()):
            data = output_path(path).read_bytes()
            hasher.update(f"{output_path(path).name}:{hashlib.sha256(data).hexdigest()}\n".encode())
    return hasher.hexdigest()


def test_digest_follows_the_bytes_of_every_parts_map_output(tmp_path) -> None:
    out = output_path(str(tmp_path))
    _persist(out, "a-00000", ["one", "two"], [1, 2])
    _persist(out, "a-00001", ["three", "four"], [3, 4])
    outputs = _loaded(out)
    first = global_parts.digest(out, "first", "", outputs)
    assert first == _hashed_files(out, outputs) == global_parts.digest(out, "first", "", outputs)
    assert global_parts.digest(out, "first", "x", outputs) != first  # and on what it depended on
    # One part mapped again to a different table of the same shape: the digest moves, so a later
    # stage's map output persisted against the old one is not reused.
    _persist(out, "a-00001", ["three", "four"], [3, 5])
    again = _loaded(out)
    assert global_parts.digest(out, "first", "", again) == _hashed_files(out, again) != first


def test_a_file_changed_after_its_record_never_reaches_the_digest(tmp_path) -> None:
    out = output_path(str(tmp_path))
    _persist(out, "a-00000", ["one", "two"], [1, 2])
    keys = tmp_path / ".parts" / "global" / "first" / "a-00000.keys.pq"
    data = bytearray(keys.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte flipped at the same size
    keys.write_bytes(bytes(data))
    assert global_parts.load(out, "first", "a-00000", 2, "") is None
