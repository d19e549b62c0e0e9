"""The dedup map side computed per piece in the stream (data_pipeline.piece_maps) equals the map of
the whole part, falls back to mapping the part whole when the pieces do not cover it exactly once,
and gives the same shards, rejects and ledger as a run that maps every part whole."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline import global_parts, parts, piece_maps, workers
from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline
from data_pipeline.stages.dedup import DedupStage

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


def _write(out: Path, table: pa.Table, cuts: list[int], stage: DedupStage | None) -> None:
    for lo, hi in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        workers.write_mapped_pieces(table.slice(lo, hi - lo), str(out), stage)


def _same(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> bool:
    return a.keys() == b.keys() and all(a[k].combine_chunks().equals(b[k]) for k in a)


def test_pieces_combine_to_the_map_of_the_whole_part(tmp_path) -> None:
    stage, part = DedupStage(), _part()
    whole, info = stage.map_part(part)
    _write(tmp_path, part, [1, 7, 8, 20], stage)  # uneven pieces, one of a single row
    rows = workers.read_pieces(tmp_path, SHARD)
    found = piece_maps.combined(parts.pieces_dir(tmp_path, SHARD), stage, rows)
    assert found is not None
    tables, counts, _ = found
    assert _same(tables, {k: v.combine_chunks() for k, v in whole.items()}) and counts == info
    assert counts["documents"] == part.num_rows and counts["empty"] == 1


def test_pieces_that_overlap_or_were_not_mapped_are_mapped_whole(tmp_path) -> None:
    stage, part = DedupStage(), _part()
    _write(tmp_path / "retried", part, [10], stage)
    _write(tmp_path / "retried", part, [4], stage)  # a retry cut the block elsewhere
    _write(tmp_path / "unmapped", part, [10], stage)
    piece = parts.pieces_dir(tmp_path / "unmapped", SHARD) / "dedup"
    sorted(piece.glob("*.json"))[-1].unlink()  # rows whose map record is missing
    whole, _ = stage.map_part(part)
    for case in ("retried", "unmapped"):
        out = tmp_path / case
        rows = workers.read_pieces(out, SHARD)
        assert rows.num_rows == part.num_rows
        assert piece_maps.combined(parts.pieces_dir(out, SHARD), stage, rows) is None
        global_parts.map_task(str(out), SHARD, part.num_rows, stage.spec())
        loaded = global_parts.load(out, "dedup", SHARD, part.num_rows, "")
        assert loaded is not None
        record = parts.load_json(global_parts.record_path(out, "dedup", SHARD))
        assert record["mapped"] == "part"
        tables = {name: pq.read_table(path) for name, path in loaded.files.items()}
        assert _same(tables, {k: v.combine_chunks() for k, v in whole.items()})


def test_a_piece_map_with_a_byte_flipped_at_the_same_size_is_never_combined(tmp_path) -> None:
    """A piece's map tables live in the output between a killed run and its resume: a byte
    flipped in one (same size) decoded, at some offsets, to other signatures or keys, which the
    part's map task combined and persisted as if mapped. Each flip must be caught (the pieces
    are mapped whole) or change nothing."""
    stage, part = DedupStage(), _part()
    whole, _ = stage.map_part(part)
    clean = {k: v.combine_chunks() for k, v in whole.items()}
    _write(tmp_path, part, [8], stage)
    rows = workers.read_pieces(tmp_path, SHARD)
    folder = parts.pieces_dir(tmp_path, SHARD) / "dedup"
    for target in sorted(folder.glob("*.parquet")):
        data = target.read_bytes()
        for at in [*range(64), *range(64, len(data), max(1, len(data) // 100))]:
            flipped = bytearray(data)
            flipped[at] ^= 0x01
            target.write_bytes(bytes(flipped))
            found = piece_maps.combined(parts.pieces_dir(tmp_path, SHARD), stage, rows)
            assert found is None or _same(found[0], clean), f"{target.name} byte {at}"
        target.write_bytes(data)


def _config(out: Path) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "inputs": [str(DATA)],
            "output": str(out),
            "shard_rows": 4,
            "batch_rows": 3,  # pieces cut across parts
            "stages": {"extract": {}, "langid": {}, "dedup": {}},
            "ray": {"timeout_s": 200},
        }
    )


def _outputs(out: Path) -> dict[str, bytes]:
    files = {"ledger.json": (out / "ledger.json").read_bytes()}
    for sub in ("data", "_rejects"):
        files.update({f"{sub}/{p.name}": p.read_bytes() for p in sorted((out / sub).glob("*"))})
    return files


def _mapped(out: Path) -> set[str]:
    folder = out / parts.PARTS / parts.GLOBAL / "dedup"
    return {parts.load_json(p)["mapped"] for p in folder.glob("*.json")}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_mapping_pieces_in_the_stream_writes_the_same_bytes(
    ray_local, tmp_path, monkeypatch
) -> None:
    streamed = run_pipeline(_config(tmp_path / "streamed"), progress=False)
    monkeypatch.setattr(DedupStage, "maps_in_stream", lambda self: False)
    whole = run_pipeline(_config(tmp_path / "whole"), progress=False)
    assert _mapped(tmp_path / "streamed") == {"pieces"} and _mapped(tmp_path / "whole") == {"part"}
    assert _outputs(tmp_path / "streamed") == _outputs(tmp_path / "whole")
    assert streamed.ledger == whole.ledger and streamed.parts > 1
    counts = [
        {k: v for k, v in s["stats"].items() if k != "extra"}  # extra: peak RSS of the workers
        for run in (streamed, whole)
        for s in run.manifest["stages"]
        if s["name"] == "dedup"
    ]
    assert counts[0] == counts[1] and counts[0]["exact_duplicates"] > 0
