"""The model-backed stages inside `pretrain data run`: tags in the shards, hashes and cutoffs in
the manifest (slow: trains the demo models and runs the Ray pipeline on the whole sample)."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data_pipeline.stages.registry import section
from pretrain.artifacts import shards as shards_artifact
from pretrain.manifest import manifest_sha256

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pipeline_records_model_hashes_cutoffs_and_tags(tmp_path, ray_local, demo_models):
    from pretrain_app.cli import main

    raw, models = demo_models  # the sample, and the demo's models trained on it (conftest.py)
    out = tmp_path / "shards"
    sets = [
        f"inputs=[{raw}]",
        f"output={out}",
        "stages.domain.enabled=true",
        f"stages.domain.model={models['domain']}",
        "stages.quality.enabled=true",
        f"stages.quality.model={models['quality']}",
        "stages.perplexity.enabled=true",
        f"stages.perplexity.model={models['lm']}",
    ]
    argv = ["data", "run", str(REPO / "configs" / "pipeline.yaml")]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 0

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["perplexity.model"] == manifest_sha256(models["lm"])
    assert manifest["models"]["domain.model"] == manifest_sha256(models["domain"])
    cutoffs = manifest["sections"]["perplexity"]["ppl_cutoffs"]
    assert set(cutoffs) >= {"en", "zh"}
    assert section(shards_artifact.open(out), "perplexity").ppl_cutoffs == cutoffs
    table = pq.read_table(sorted(glob.glob(str(out / "data" / "*.parquet"))))
    rows = table.select(["lang", "domain", "quality_score", "perplexity", "ppl_bucket"])
    rows = rows.to_pylist()
    assert {r["domain"] for r in rows} >= {"prose", "code", "math"}
    assert all(r["quality_score"] is None or 0 <= r["quality_score"] <= 1 for r in rows)
    for lang in ("en", "zh"):
        low, high = cutoffs[lang]
        for r in rows:
            if r["lang"] == lang and r["perplexity"] is not None:
                want = (
                    "head"
                    if r["perplexity"] <= low
                    else "middle"
                    if r["perplexity"] <= high
                    else "tail"
                )
                assert r["ppl_bucket"] == want
    assert all(r["ppl_bucket"] == "none" for r in rows if r["lang"] not in ("en", "zh"))
