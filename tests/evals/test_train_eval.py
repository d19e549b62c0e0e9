"""Evaluation during training (`eval.every`, `eval.sets`): the val/* values the trainer records equal
what `pretrain eval run` computes on the checkpoint of the same step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pretrain.config import parse_config
from pretrain.errors import ConfigError
from tests.trainer.trainer_testlib import tiny_config
from trainer.config import TrainConfig


def test_eval_every_needs_sets_and_one_pipeline_stage():
    with pytest.raises(ConfigError, match="eval.sets is not"):
        parse_config(TrainConfig, {"eval": {"every": 5}}, source="test")
    with pytest.raises(ConfigError, match="pipeline > 1 is not supported"):
        data = {"eval": {"every": 5, "sets": "x"}, "parallel": {"pipeline": 2}}
        parse_config(TrainConfig, data, source="test")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recorded_val_bpb_equals_eval_run_on_the_same_checkpoint(chain, tmp_path):
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from tests.trainer.trainer_testlib import run_ranks

    mixture_cfg = yaml.safe_load(chain["mixture_config"].read_text())
    mixture_cfg["out"] = str(tmp_path / "mixture")
    build_mixture(parse_config(MixtureConfig, mixture_cfg))
    run_dir = tmp_path / "run"
    config = tiny_config(
        run_dir,
        run={"train_steps": 10},
        data={"source": "mixture", "mixture_dir": str(tmp_path / "mixture")},
        checkpoint={"every": 5, "keep_last": 2},
        metrics={"trackers": ["tensorboard"], "peak_flops": 1e11},
        eval={"every": 5, "sets": str(chain["evalsets"]), "max_docs": 20},
    )
    run_ranks(config, 1)
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    recorded = {r["step"]: r for r in records if r.get("event") == "eval"}
    assert sorted(recorded) == [5, 10]
    assert {"val/bpb", "val/loss", "val/bpb/prose/en", "val/bpb/code/en"} <= set(recorded[5])

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MASTER_"))}
    command = [str(Path(sys.executable).parent / "pretrain"), "eval", "run", str(run_dir)]
    command += ["--sets", str(chain["evalsets"]), "--max-docs", "20", "--tasks"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (run_dir / "evals" / "results.jsonl").read_text().splitlines()
    results = {r["step"]: r["metrics"] for r in map(json.loads, lines)}
    assert sorted(results) == [5, 10]
    for step, record in recorded.items():
        for key in ("bpb", "loss", "bpb/prose/en", "bpb/code/en"):
            assert record[f"val/{key}"] == pytest.approx(results[step][key], rel=1e-5), key

    # the export of step 10 (tokenizer found through the run's lineage) scores the same in
    # transformers as the checkpoint through `pretrain eval run EXPORT_DIR`
    export = tmp_path / "hf"
    pretrain = str(Path(sys.executable).parent / "pretrain")
    done = subprocess.run(
        [pretrain, "export", str(run_dir), "--out", str(export)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (export / "tokenizer_config.json").is_file()
    command = [pretrain, "eval", "run", str(export), "--sets", str(chain["evalsets"])]
    command += ["--max-docs", "20", "--tasks"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    line = (tmp_path / "hf-evals" / "results.jsonl").read_text().splitlines()[0]
    exported = json.loads(line)
    assert exported["step"] == 10
    for key in ("bpb", "bpb/prose/en", "bpb/code/en"):
        assert exported["metrics"][key] == pytest.approx(results[10][key], rel=1e-5), key

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"val/bpb", "val/loss", "val/bpb/prose/en", "train/loss"} <= set(tags)
    assert [e.step for e in events.Scalars("val/bpb")] == [5, 10]
