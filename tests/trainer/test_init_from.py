"""`checkpoint.init_from` (issue 35.1): a new run starts from a trained checkpoint's weights with a
fresh optimizer, schedule and data position (continued pretraining, annealing), and its manifest
names that checkpoint among its inputs; a checkpoint of another model is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pretrain.config import parse_config
from pretrain.manifest import load_manifest, manifest_sha256
from pretrain_app.cli import main
from tests.trainer.trainer_testlib import tiny_config
from trainer.callbacks import Callback
from trainer.config import OptimConfig, TrainConfig
from trainer.step import lr_at


class _StartProbe(Callback):
    """What the trainer holds when its first step starts."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.optimizer_states = -1
        self.step = -1

    def on_step_start(self, trainer: Any, step: int) -> None:
        if step != 1:
            return
        state = trainer.gpt.state_dict()
        self.weights = {k: v.detach().clone() for k, v in state.items() if torch.is_tensor(v)}
        optimizers = getattr(trainer.optimizer, "chained_optimizers", [trainer.optimizer])
        self.optimizer_states = sum(len(o.optimizer.state) for o in optimizers)
        self.step = trainer.state.step


@pytest.mark.timeout(300)
def test_init_from_takes_the_weights_and_nothing_else(tmp_path: Path, reference_run) -> None:
    from trainer.inference import load_model
    from trainer.model import close_distributed
    from trainer.worker import run

    source_run = reference_run[0]
    source = source_run / "checkpoints" / "iter_0000006"  # the run's newest checkpoint
    run_dir = tmp_path / "anneal"
    config = tiny_config(run_dir, run={"train_steps": 2}, checkpoint={"init_from": str(source_run)})
    probe = _StartProbe()
    close_distributed()  # a model loaded in-process by an earlier test keeps its group
    run(parse_config(TrainConfig, config), callbacks=[probe])

    trained = load_model(source).model.state_dict()
    close_distributed()
    assert probe.weights and probe.weights.keys() <= trained.keys()
    for name, value in probe.weights.items():
        assert torch.equal(value, trained[name]), name
    assert probe.optimizer_states == 0 and probe.step == 0  # fresh optimizer, step 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [(r["step"], r["batch"]) for r in steps] == [(1, 0), (2, 1)]
    optim = OptimConfig(**config["optim"])
    assert steps[0]["lr"] == pytest.approx(lr_at(0, optim, 2))  # its own schedule, from 0
    inputs = load_manifest(run_dir)["inputs"]
    assert inputs == [
        {
            "path": str(source.resolve()),
            "kind": "checkpoint",
            "manifest_sha256": manifest_sha256(source),
        }
    ]
    state = json.loads((run_dir / "checkpoints" / "iter_0000002" / "state.json").read_text())
    assert state["init_from"] == str(source.resolve())  # kept across a resume


@pytest.mark.timeout(120)
def test_init_from_another_model_is_refused_in_one_line(tmp_path, reference_run, capsys) -> None:
    config = tiny_config(
        tmp_path / "run",
        model={"hidden_size": 128},
        checkpoint={"init_from": str(reference_run[0] / "checkpoints" / "iter_0000006")},
    )
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["launch", str(path), "--nproc", "1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.init_from refused" in err[0], err
    missing = tiny_config(tmp_path / "run", checkpoint={"init_from": str(tmp_path / "nothing")})
    path.write_text(yaml.safe_dump(missing))
    assert main(["launch", str(path), "--nproc", "1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.init_from" in err[0], err
