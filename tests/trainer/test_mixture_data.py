"""Training on a real mixture artifact: phases switch sequence length with the schedule continuing,
per-component tokens are reported, and a different mixture (tokenizer/build) refuses to resume."""

from __future__ import annotations

import json

import pytest

from pretrain.config import parse_config
from pretrain.errors import LockMismatch
from pretrain.manifest import load_manifest
from tests.mixtures.conftest import TOKENIZER, make_encoded, mixture_config
from tests.trainer.trainer_testlib import RanksFailed, run_ranks, tiny_config
from trainer.config import OptimConfig, TrainConfig
from trainer.step import lr_at

PHASES = [
    {"name": "short", "share": 0.5, "seq_length": 32},
    {"name": "long", "share": 0.5, "seq_length": 64},
]


def _mixture(tmp_path, name: str, tokenizer: dict | None = None):
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig

    encoded = make_encoded(tmp_path / f"enc-{name}", tokenizer=tokenizer)
    data = mixture_config(encoded, tmp_path / name, total_tokens=16 * 32 * 8)
    data["recipe"]["phases"] = PHASES
    if tokenizer is not None:
        data["build"]["tokenizer_sha256"] = tokenizer["sha256"]
    build_mixture(parse_config(MixtureConfig, data))
    return tmp_path / name


def _config(run_dir, mixture, **extra):
    return tiny_config(
        run_dir,
        run={"train_steps": None, **extra.pop("run", {})},
        model={"vocab_size": 60001, "seq_length": 64},
        batch={"micro_batch_size": 8, "global_batch_size": 16},
        data={"source": "mixture", "mixture_dir": str(mixture), **extra.pop("data", {})},
        checkpoint={"every": 3},
        **extra,
    )


@pytest.mark.timeout(300)
def test_trains_through_mixture_phases_and_refuses_another_mixture(tmp_path):
    mixture = _mixture(tmp_path, "mix")
    run_dir = tmp_path / "run"
    run_ranks(_config(run_dir, mixture), 1)
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["seq_length"] for r in steps] == [32, 32, 32, 32, 64, 64]
    optim = OptimConfig(**tiny_config(run_dir)["optim"])
    assert [r["lr"] for r in steps] == pytest.approx([lr_at(s, optim, 6) for s in range(6)])
    assert steps[-1]["tokens_seen"] == 4 * 16 * 32 + 2 * 16 * 64
    per_component = steps[-1]["tokens_per_component"]
    assert set(per_component) == {"web", "code", "books_hq"}
    assert sum(per_component.values()) == steps[-1]["tokens_seen"]
    assert per_component["web"] > per_component["books_hq"] > 0  # weights 0.5 vs 0.2
    manifest = load_manifest(run_dir)
    recorded = load_manifest(mixture)
    assert manifest["mixture"]["build_sha256"] == recorded["build_sha256"]
    assert manifest["tokenizer"] == TOKENIZER  # name, sha256 and id, as the mixture records them
    assert steps[-1]["sequences_per_component"]["web"] * 32 <= per_component["web"]
    assert manifest["inputs"][0]["kind"] == "mixture"

    other_sha = "ab" * 32
    other = _mixture(tmp_path, "other", {"name": "bpe-b", "sha256": other_sha, "id": "bpe-b@abab"})
    with pytest.raises(RanksFailed, match="resume refused.*tokenizer"):
        run_ranks(_config(run_dir, other, run={"train_steps": 7}), 1)


@pytest.mark.timeout(120)
def test_pinned_build_hash_mismatch_refuses(tmp_path):
    from trainer.data import check_identity, mixture_data

    mixture = _mixture(tmp_path, "mix")
    config = parse_config(
        TrainConfig, _config(tmp_path / "run", mixture, data={"expect_build_sha256": "0" * 64})
    )
    with pytest.raises(LockMismatch, match="data.expect_build_sha256 = 000000000000"):
        check_identity(config, mixture_data(config), None)
    pinned = load_manifest(mixture)["build_sha256"]
    good = config.model_copy(
        update={"data": config.data.model_copy(update={"expect_build_sha256": pinned})}
    )
    check_identity(good, mixture_data(good), None)


def test_synthetic_data_with_a_pinned_tokenizer_resumes(tmp_path):
    """data.tokenizer_dir on synthetic data sizes the vocabulary; it pins no mixture, so a resume
    (checkpoint.resume, on by default) is not refused for the synthetic data's missing hash."""
    from trainer.data import check_identity, open_data

    config = parse_config(
        TrainConfig,
        tiny_config(tmp_path / "run", data={"tokenizer_dir": str(tmp_path / "tokenizer")}),
    )
    assert config.data.source == "synthetic" and config.checkpoint.resume
    synthetic = open_data(config)
    check_identity(config, synthetic, None)  # a fresh run
    check_identity(config, synthetic, dict(synthetic.identity))  # a resume


@pytest.mark.timeout(120)
def test_plan_reads_the_built_mixture(tmp_path):
    """`pretrain plan` takes the data's capacity and global batch from a built mixture."""
    from pretrain.errors import ConfigError
    from trainer.plan import build_plan

    mixture = _mixture(tmp_path, "mix")
    config = parse_config(TrainConfig, _config(tmp_path / "run", mixture))
    components = load_manifest(mixture)["components"]
    capacity = sum(c["available_tokens"] * c["max_epochs"] for c in components)
    assert build_plan(config)["data"]["available_tokens"] == capacity > 0
    other = config.model_copy(
        update={"batch": config.batch.model_copy(update={"global_batch_size": 32})}
    )
    with pytest.raises(ConfigError, match="the mixture was built for global batch W=16"):
        build_plan(other)
