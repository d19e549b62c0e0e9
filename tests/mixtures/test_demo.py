"""The demo step builds and reports a mixture from the demo's encoded and tokenizer artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixtures.dataset import MixtureDataset
from mixtures.demo import GLOBAL_BATCH, SEQ_LENGTH, step
from pretrain.artifacts.tokenizer import identity_of
from pretrain.manifest import file_records, write_manifest
from pretrain_app.demo import DemoContext
from tests.mixtures.conftest import make_encoded


def _tokenizer_artifact(root: Path) -> dict:
    root.mkdir(parents=True)
    (root / "lock.json").write_text(json.dumps({"name": "bpe-demo", "vocab_size": 65000}))
    (root / "tokenizer.json").write_text("{}")
    sha = identity_of({rel: entry["sha256"] for rel, entry in file_records(root).items()})
    info = {"name": "bpe-demo", "sha256": sha, "id": f"bpe-demo@{sha[:6]}"}
    write_manifest(root, "tokenizer", extra={"tokenizer": info})
    return info


@pytest.mark.timeout(180)
def test_demo_step_builds_reports_and_reuses(tmp_path: Path) -> None:
    info = _tokenizer_artifact(tmp_path / "tokenizer")
    encoded = make_encoded(tmp_path / "encoded", prefixes=2, docs=120, max_len=400, tokenizer=info)
    ctx = DemoContext(out=tmp_path / "demo")
    ctx.artifacts.update({"encoded": encoded, "tokenizer": tmp_path / "tokenizer"})
    summary = step(ctx)
    mixture = ctx.artifacts["mixture"]
    # The synthetic data has no `prose`/`math` domain: the step keeps the components it can serve
    # (here `code`, weights rescaled) and both phases of configs/mixture.yaml.
    assert "1 components (code)" in summary and "anneal" in summary
    assert "max per-batch deviation" in summary
    assert (mixture / "report" / "report.png").is_file()
    ds = MixtureDataset(mixture)
    assert ds.seq_length == SEQ_LENGTH and ds.global_batch == GLOBAL_BATCH
    assert ds.tokenizer_sha256 == info["sha256"] and len(ds) > 0
    before = (mixture / "manifest.json").stat().st_mtime_ns
    step(ctx)
    assert (mixture / "manifest.json").stat().st_mtime_ns == before
