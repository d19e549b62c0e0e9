"""Row pieces (`.parts/pieces/<shard>/<first>-<last>.<sha256>.parquet`, the stream's tagged rows
that the merge and the first global stage's map read back) carry their sha256 in their name: a
piece whose bytes changed after it was written is a one-line error naming it, never rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline import parts, workers
from pretrain.errors import PretrainError

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
SHARD = "docs-00000"


def _part() -> pa.Table:
    """One part of real fixture texts, each twice (exact duplicates), an empty and a tiny one."""
    lines = (DATA / "docs.jsonl").read_bytes().splitlines()[:8]  # the well-formed records
    texts = [json.loads(line)["text"] for line in lines] * 2
    texts += ["", "two words"]
    return pa.table(
        {
            "id": [f"docs/{i}" for i in range(len(texts))],
            "text": texts,
            "_shard": [SHARD] * len(texts),
            "_row": list(range(len(texts))),
            "_raw_bytes": [len(t) for t in texts],
        }
    )


def _write(out: Path, table: pa.Table, cuts: list[int]) -> None:
    for lo, hi in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        workers.write_rows(table.slice(lo, hi - lo), str(out))


def test_a_row_piece_with_a_byte_flipped_at_the_same_size_is_never_read_as_rows(tmp_path) -> None:
    """A byte flipped in a piece (a disk error, a second writer) between the stream and the
    merge decoded, at some offsets, to other text (Parquet pages carry no checksum here), which
    the merge wrote into the shard as good; at others pyarrow raised a traceback. Every flip
    must be a one-line error naming the piece."""
    part = _part()
    _write(tmp_path, part, [5])
    clean = workers.read_rows(tmp_path, SHARD)
    assert clean.equals(part)
    pieces = sorted(parts.rows_dir(tmp_path, SHARD).glob("*.parquet"))
    assert len(pieces) == 2
    for target in pieces:
        data = target.read_bytes()
        for at in [*range(0, 64, 7), *range(64, len(data), max(1, len(data) // 60))]:
            flipped = bytearray(data)
            flipped[at] ^= 0x01
            target.write_bytes(bytes(flipped))
            with pytest.raises(PretrainError, match="re-run") as info:
                workers.read_rows(tmp_path, SHARD)
            assert target.name in str(info.value) and "\n" not in str(info.value), at
        target.write_bytes(data)
    assert workers.read_rows(tmp_path, SHARD).equals(part)


def test_a_file_that_is_not_a_piece_is_refused_not_read(tmp_path) -> None:
    part = _part()
    _write(tmp_path, part, [])
    stray = parts.rows_dir(tmp_path, SHARD) / "000000000000-000000000003.parquet"
    stray.write_bytes(b"PAR1 rows nobody hashed")
    with pytest.raises(PretrainError, match=stray.name):
        workers.read_rows(tmp_path, SHARD)


def test_rows_written_twice_by_a_retry_are_read_once(tmp_path) -> None:
    part = _part()
    _write(tmp_path, part, [6])
    _write(tmp_path, part, [3])  # a retried task cut its block elsewhere
    table = workers.read_rows(tmp_path, SHARD)
    assert table.equals(part) and isinstance(table, pa.Table)
