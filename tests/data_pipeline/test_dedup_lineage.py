"""An incremental dedup names what it was deduplicated against (issue 35.3), through two real data
runs: corpus A saves its index, corpus B dedups against it. B's manifest lists the index among its
inputs by manifest hash and `pretrain show` shows it in the lineage; the ledger counts the
cross-corpus copies; each copy carries the id of A's document it copies; an index whose bytes
changed is refused before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pretrain.manifest import load_manifest, manifest_sha256
from pretrain_app.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "dedup" / "docs.jsonl"
OLD_IDS = {"en-00", "en-01", "en-06", "zh-zh-CN", "tiny-1"}
COPIES = {"en-00-copy": "en-00", "en-01-near": "en-01", "zh-CN-near": "zh-zh-CN"}
"""B's documents that copy one of A's (by the test_dedup fixture's groups; `tiny-2` copies a
document too short to keep through extract, so it is left out here)."""


def _config(rows: list[dict], folder: Path, index: dict) -> dict:
    source = folder / "in" / "docs.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "inputs": [str(source.parent)],
        "output": str(folder / "out"),
        "stages": {"extract": {}, "dedup": {"index": index}},
        "ray": {"timeout_s": 250},
    }


@pytest.mark.ray
@pytest.mark.timeout(400)
def test_dedup_index_is_a_verified_input_named_in_lineage_and_ledger(ray_local, tmp_path, capsys):
    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline

    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    rows = [{"id": r["id"], "text": r["text"]} for r in rows if not r["id"].startswith("tiny")]
    index = tmp_path / "index-a"
    old = _config([r for r in rows if r["id"] in OLD_IDS], tmp_path / "a", {"save_to": str(index)})
    run_pipeline(PipelineConfig.model_validate(old), progress=False)
    new = _config(
        [r for r in rows if r["id"] not in OLD_IDS], tmp_path / "b", {"against": str(index)}
    )
    out = Path(new["output"])
    run_pipeline(PipelineConfig.model_validate(new), progress=False)

    inputs = load_manifest(out)["inputs"]
    assert {
        "path": str(index.resolve()),
        "kind": "dedup-index",
        "manifest_sha256": manifest_sha256(index),
    } in inputs
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"dedup-index {manifest_sha256(index)[:12]} ok  {index.resolve()}" in shown

    table = pq.read_table(out / "data").to_pylist()
    old_ids = set(pq.read_table(tmp_path / "a" / "out" / "data").column("id").to_pylist())
    copies = [r for r in table if r["dedup_reason"] == "earlier_corpus"]
    assert len(copies) == len(COPIES)  # the data job assigns its own ids: counted, then checked
    for row in copies:
        assert row["dup_of"] in old_ids and not row["dup_keep"] and row["dup_cluster_size"] >= 2
    others = [r for r in table if r["dedup_reason"] != "earlier_corpus"]
    assert all(r["dup_of"] is None for r in others)
    assert all((r["dedup_reason"] is None) == r["dup_keep"] for r in others)
    ledger = json.loads((out / "ledger.json").read_text())
    (dedup,) = [s for s in ledger["stages"] if s["stage"] == "dedup"]
    assert dedup["reasons"]["earlier_corpus"]["documents"] == len(COPIES)
    assert dedup["reasons"]["earlier_corpus"]["action"] == "tagged"

    part = next((index / "docs").glob("*.parquet"))
    part.write_bytes(part.read_bytes() + b"x")
    rerun = tmp_path / "rerun.json"
    rerun.write_text(json.dumps({**new, "output": str(tmp_path / "c")}))
    capsys.readouterr()
    assert main(["data", "run", str(rerun), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bytes" in err[0] and str(index) in err[0], err
