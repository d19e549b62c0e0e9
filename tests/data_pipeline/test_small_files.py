"""Many small inputs (issue 34): 2,000 one-document files are packed into a few units of work by
size, every document is in the shards or the rejects and counted per file, and a resume after a
part was published redoes only the parts that were not (the old code made one part, one Ray
task and one merge per file: 2,000 parts)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.inputs import InputFile, pack_units
from data_pipeline.runner import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline" / "docs.jsonl"
FILES = 2000


def _small_files(folder: Path) -> None:
    """FILES one-document JSON Lines files of real text from the fixture, its rejects among
    them (malformed JSON, bad UTF-8, an empty text: rows the ledger must count); not its record
    without a text field (a file of only that record is refused unless on_unreadable=reject)."""
    lines = [line for line in DATA.read_bytes().splitlines() if b'"body"' not in line]
    folder.mkdir()
    for i in range(FILES):
        (folder / f"doc-{i:05d}.jsonl").write_bytes(lines[i % len(lines)] + b"\n")


def _config(folder: Path, out: Path) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "inputs": [str(folder)],
            "output": str(out),
            "shard_rows": 600,
            "pack_bytes": 1 << 20,
            "ray": {"timeout_s": 200},
        }
    )


def _shards(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for folder in ("data", "_rejects")
        for p in sorted((out / folder).glob("*"))
    }


@pytest.mark.slow  # ~150 s at a load of 20 on 2 cores: two runs of 2,000 documents
@pytest.mark.ray
@pytest.mark.timeout(400)
def test_small_files_are_packed_counted_and_resumed(ray_local, tmp_path: Path) -> None:
    folder, out = tmp_path / "in", tmp_path / "out"
    _small_files(folder)
    result = run_pipeline(_config(folder, out), progress=False)
    assert result.ledger["documents_in"] == FILES
    assert result.ledger["conservation"]["balanced"]
    # Bounded by size (rows per part, bytes per unit), not by the number of files.
    assert result.parts <= 8, result.parts
    ids = _ids(out)
    assert sorted({i.split("/", 1)[0] for i in ids}) == [f"doc-{i:05d}" for i in range(FILES)]
    assert len(ids) == len(set(ids)) == FILES
    counted = [
        item
        for path in (out / ".parts").glob("*.read.json")
        for item in json.loads(path.read_text())["inputs"]
    ]
    assert sorted(c["stem"] for c in counted) == [f"doc-{i:05d}" for i in range(FILES)]
    assert all(c["records"] == 1 for c in counted)

    before = _shards(out)
    lost = sorted(p.stem for p in (out / "data").glob("*.parquet"))[-1]
    (out / "data" / f"{lost}.parquet").unlink()
    (out / ".parts" / f"{lost}.json").unlink()
    (out / "_rejects" / f"{lost}.pq").unlink(missing_ok=True)
    resumed = run_pipeline(_config(folder, out), progress=False)
    assert resumed.reused_parts == result.parts - 1
    assert _shards(out) == before

    # A file added in the middle moves the units after it: none of their old parts survives.
    (folder / "doc-00500a.jsonl").write_bytes((folder / "doc-00000.jsonl").read_bytes())
    grown = run_pipeline(_config(folder, out), progress=False)
    ids = _ids(out)
    assert len(ids) == len(set(ids)) == FILES + 1 == grown.ledger["documents_in"]


def _ids(out: Path) -> list[str]:
    """The ids of every document in the shards and the rejects (a stale part would repeat some)."""
    return [
        row
        for path in [*(out / "data").glob("*.parquet"), *(out / "_rejects").glob("*.pq")]
        for row in pq.read_table(path, columns=["id"]).column("id").to_pylist()
    ]


@pytest.mark.timeout(30)
def test_packing_is_by_size_and_input_order() -> None:
    files = [InputFile(f"/in/{n}.jsonl", "jsonl", n) for n in "abcdef"]
    sizes = {"a": 10, "b": 500, "c": 10, "d": 10, "e": 10, "f": 10}
    units = pack_units(files, sizes, small_bytes=100, pack_bytes=25, min_files=2)
    assert [(u.stem, u.stems) for u in units] == [
        ("a", ["a", "c"]),
        ("b", ["b"]),
        ("d", ["d", "e"]),
        ("f", ["f"]),
    ]
    assert pack_units(files, sizes, 100, 25, min_files=2) == units  # the same units every time
    alone = pack_units(files, sizes, 100, 25, min_files=6)  # fewer small files: one unit each
    assert [u.stems for u in alone] == [[n] for n in "abcdef"]
