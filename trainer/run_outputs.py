"""What a finished run leaves besides checkpoints: the run manifest and summary.json (rank 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch

from pretrain.artifacts import run as run_kind
from pretrain.config import config_dict
from pretrain.manifest import atomic_write_json
from trainer.config import TrainConfig
from trainer.data import TrainData
from trainer.guard import SpikeGuard
from trainer.metrics import Throughput, read_metrics
from trainer.step import TrainState


class FinishedRun(Protocol):
    """What the outputs are made of (trainer/loop.py's Trainer at the end of fit or smoke)."""

    config: TrainConfig
    run_dir: Path
    data: TrainData
    state: TrainState
    num_params: int
    guard: SpikeGuard
    throughput: Throughput


def load_launch_info(run_dir: Path) -> dict[str, Any]:
    """RUN/launch.json as the launcher wrote it (gate decision, command); {} without a launcher."""
    path = run_dir / "launch.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_outputs(trainer: FinishedRun, extra: dict[str, Any]) -> None:
    write_run_manifest(trainer, load_launch_info(trainer.run_dir), extra)
    atomic_write_json(trainer.run_dir / "summary.json", summary(trainer, extra))


def write_run_manifest(trainer: FinishedRun, launch_info: dict[str, Any], extra: dict) -> None:
    identity = trainer.data.identity
    data = trainer.config.data
    inputs = [data.mixture_dir] if data.source == "mixture" and data.mixture_dir else []
    fields = run_kind.RunFields(
        tokenizer=identity.get("tokenizer") or {"sha256": identity.get("tokenizer_sha256")},
        mixture=run_kind.MixtureRef(
            build_sha256=identity.get("build_sha256"),
            recipe_sha256=identity.get("recipe_sha256"),
        ),
        gate=launch_info.get("gate"),
        mfu=trainer.throughput.manifest(),
        world_size=torch.distributed.get_world_size(),
        guard={"rollbacks": trainer.guard.rollbacks, "events": trainer.guard.events},
        **extra,
    )
    run_kind.write(  # the command: the launcher's (trainer.train.train records it)
        trainer.run_dir,
        fields,
        config=config_dict(trainer.config),
        inputs=inputs,
        counts={
            "steps": trainer.state.step,
            "tokens_seen": trainer.state.tokens_seen,
            "parameters": trainer.num_params,
        },
    )


def summary(trainer: FinishedRun, extra: dict[str, Any]) -> dict[str, Any]:
    last = read_metrics(trainer.run_dir / "metrics.jsonl")
    losses = [r for r in last if "loss" in r]
    return {
        "steps": trainer.state.step,
        "tokens_seen": trainer.state.tokens_seen,
        "final_loss": losses[-1]["loss"] if losses else None,
        "rollbacks": trainer.guard.rollbacks,
        "parameters": trainer.num_params,
        **extra,
    }
