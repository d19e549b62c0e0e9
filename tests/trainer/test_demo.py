"""The demo's launch step: the full config's tiny override, gated, on a real tokenizer + mixture."""

from __future__ import annotations

import pytest

from pretrain.manifest import load_manifest, verify
from pretrain_app.demo import DemoContext
from tests.tokenizer.tok_helpers import make_records, train_config
from trainer.metrics import read_metrics


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_launch_step_trains_full_config_override_with_gate_recorded(tmp_path):
    from mixtures import demo as mixtures_demo
    from tests.tokenizer.synthetic import write_shards
    from tokenizer.encode import encode
    from tokenizer.train import train
    from trainer import demo

    shards = write_shards(tmp_path / "shards", make_records(300), docs_per_shard=150)
    tokenizer = tmp_path / "tokenizer"
    train(train_config(shards, tokenizer))
    encode(tokenizer, shards, tmp_path / "encoded", backend="inline")
    ctx = DemoContext(out=tmp_path / "demo")
    ctx.artifacts.update(tokenizer=tokenizer, encoded=tmp_path / "encoded")
    mixtures_demo.step(ctx)
    from evals.sets import EvalBuildConfig, build_eval_sets

    evalsets = tmp_path / "evalsets"
    build_eval_sets(EvalBuildConfig(shards=str(shards), out=str(evalsets), min_docs_per_set=1))
    ctx.artifacts["evalsets"] = evalsets  # as the demo's ablation step leaves it

    summary = demo.step(ctx)

    run_dir = ctx.artifacts["run"]
    manifest = verify(run_dir)
    assert manifest["kind"] == "run"
    assert manifest["gate"]["status"] == "overridden"  # no ablation report in this context
    assert manifest["gate"]["override_reason"].startswith("demo: the ablation report did not")
    assert manifest["gate"]["refusal"]
    assert manifest["config"]["run"]["kind"] == "full"
    assert manifest["config"]["model"]["num_layers"] == 2  # the explicit tiny override
    mixture = load_manifest(ctx.artifacts["mixture"])
    assert manifest["mixture"]["build_sha256"] == mixture["build_sha256"]
    losses = [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert len(losses) >= 4 and losses[-1] < losses[0]
    assert "gate overridden" in summary
    evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("event") == "eval"]
    assert [r["step"] for r in evals] == [6, 12]  # the demo's launch turns eval.every on
    assert all(r["val/bpb"] > 0 for r in evals) and manifest["config"]["eval"]["every"] == 6
