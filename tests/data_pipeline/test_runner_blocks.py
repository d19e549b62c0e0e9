"""How the stream is cut does not change the output: the map actors take one block per call and
run the stages over slices of at most `batch_rows` rows of it, so batch_rows and ray.block_mb
(which decide how many rows a block, a slice and an actor task hold) must leave the shards,
rejects and ledger byte-identical, with dedup (a global stage) after the map stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


def _run(out: Path, batch_rows: int, block_mb: int) -> dict[str, bytes]:
    config = PipelineConfig.model_validate(
        {
            "inputs": [str(DATA)],
            "output": str(out),
            "shard_rows": 5,
            "batch_rows": batch_rows,
            "stages": {"extract": {}, "langid": {}, "rules": {}, "dedup": {}, "safety": {}},
            "ray": {"timeout_s": 400, "block_mb": block_mb},
        }
    )
    result = run_pipeline(config, progress=False)
    assert result.ledger["conservation"]["balanced"]
    files = {"ledger.json": (out / "ledger.json").read_bytes()}
    for sub in ("data", "_rejects"):
        files |= {f"{sub}/{p.name}": p.read_bytes() for p in sorted((out / sub).glob("*"))}
    return files


def test_rows_per_block_slice_and_task_leave_the_output_unchanged(ray_local, tmp_path) -> None:
    one_row = _run(tmp_path / "one", batch_rows=1, block_mb=1)
    coarse = _run(tmp_path / "coarse", batch_rows=64, block_mb=64)
    assert any(name.startswith("data/") for name in one_row)
    assert json.loads(one_row["ledger.json"])["documents_in"] > 5  # more than one part
    assert one_row == coarse
