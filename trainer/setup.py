"""Opening a run's data and deciding its vocabulary size (shared by the loop and the launcher)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pretrain.artifacts import base as base_artifact
from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.errors import ArtifactError, ConfigError
from trainer.config import TrainConfig
from trainer.data import TrainData, mixture_data, synthetic_data, write_synthetic_corpus


def synthetic_batches(config: TrainConfig) -> int:
    """Global batches the synthetic source provides: the steps plus room for guard skips."""
    if not config.run.train_steps:
        raise ConfigError("run.train_steps is not set; synthetic data needs an explicit step count")
    guard = config.guard
    return config.run.train_steps + (guard.max_rollbacks + 1) * guard.skip_batches


def open_data(config: TrainConfig, run_dir: Path, rank: int) -> TrainData:
    """The run's TrainData; rank 0 writes the synthetic corpus first when that is the source."""
    if config.data.source == "mixture":
        return mixture_data(config)
    directory = run_dir / "data"
    if rank == 0 and not (directory / "synthetic.idx").is_file():
        directory.mkdir(parents=True, exist_ok=True)
        write_synthetic_corpus(
            directory / "synthetic",
            config.data.synthetic_documents,
            config.data.synthetic_vocab,
            config.run.seed,
        )
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return synthetic_data(config, directory, synthetic_batches(config))


def _lineage_tokenizer(directory: Path, depth: int = 3) -> Path | None:
    """The tokenizer artifact an artifact was (transitively) made from, via manifest lineage."""
    try:
        manifest = base_artifact.peek(directory)
    except ArtifactError:
        return None
    for entry in manifest.inputs:
        if entry.kind == tokenizer_artifact.KIND:
            return Path(entry.path)
        if depth > 0:
            found = _lineage_tokenizer(Path(entry.path), depth - 1)
            if found is not None:
                return found
    return None


def tokenizer_dir(config: TrainConfig) -> Path | None:
    if config.data.tokenizer_dir:
        return Path(config.data.tokenizer_dir)
    if config.data.source == "mixture" and config.data.mixture_dir:
        return _lineage_tokenizer(Path(config.data.mixture_dir))
    return None


def resolve_vocab(config: TrainConfig, data: TrainData | Any) -> int:
    """model.vocab_size, else the tokenizer's (pinned or found through lineage), else the data's."""
    if config.model.vocab_size:
        return config.model.vocab_size
    directory = tokenizer_dir(config)
    if directory is not None and directory.is_dir():
        from tokenizer.lock import load_locked

        return int(load_locked(directory).vocab_size)
    if data.vocab_size:
        return int(data.vocab_size)
    raise ConfigError(
        "model.vocab_size is not set and no tokenizer was found for the mixture; "
        "set model.vocab_size or data.tokenizer_dir"
    )
