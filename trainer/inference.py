"""Load a training checkpoint for evaluation on CPU: `load_model(checkpoint_dir).logprobs(tokens)`.

The checkpoint may have been written with any TP/PP layout; dist_checkpointing reshards it into a
single-process model (TP=1, PP=1). Only the model weights are read, not the optimizer state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pretrain.config import parse_config
from pretrain.errors import ArtifactError
from pretrain.manifest import verify
from pretrain.safeload import check_checkpoint
from trainer.checkpoint import load, read_state
from trainer.config import ParallelConfig, TrainConfig
from trainer.step import next_token_logprobs


@dataclass
class LoadedModel:
    """A GPTModel in eval mode with the identity of the run that trained it."""

    model: Any
    step: int
    tokenizer_sha256: str | None
    seq_length: int
    vocab_size: int
    config: TrainConfig

    def logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        """log p(tokens[:, t+1] | tokens[:, :t+1]) for every position: FloatTensor[B, S-1]."""
        return next_token_logprobs(self.model, tokens)

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position: FloatTensor[B, S, padded vocab]."""
        from trainer.cpu_compat import device_context

        tokens = torch.as_tensor(tokens, dtype=torch.long)
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        with device_context():
            return self.model(tokens, positions, None).float()


def _cpu_config(state: dict[str, Any]) -> TrainConfig:
    config = parse_config(TrainConfig, state["config"], source="state.json")
    parallel = ParallelConfig(backend="gloo")  # one CPU rank: TP/PP/DP 1, no ZeRO
    optim = config.optim.model_copy(update={"precision": "fp32"})
    return config.model_copy(update={"parallel": parallel, "optim": optim})


def load_model(checkpoint_dir: str | os.PathLike) -> LoadedModel:
    """Load `RUN/checkpoints/iter_NNNNNNN` (verified against its manifest) for CPU inference."""
    from trainer.local_torchrun import loopback_gloo
    from trainer.model import build_model, init_distributed

    path = Path(checkpoint_dir)
    check_checkpoint(path, verify(path))
    if not (path / "state.json").is_file():
        raise ArtifactError(f"{path} has no state.json; pass a checkpoints/iter_NNNNNNN directory")
    state = read_state(path)
    config = _cpu_config(state)
    threads = torch.get_num_threads()
    with loopback_gloo():  # gloo's device listeners on 127.0.0.1, not the host's address
        init_distributed(config)  # a world of one here (or the caller's world)
    torch.set_num_threads(threads)  # init_distributed sets a rank's count, not the caller's
    vocab = int(state["vocab_size"])
    model = build_model(config, vocab)
    load(path, model, None, prefix="module.")  # training saved it inside megatron DDP
    model.eval()
    return LoadedModel(
        model=model,
        step=int(state["step"]),
        tokenizer_sha256=state.get("tokenizer_sha256"),
        seq_length=config.model.seq_length,
        vocab_size=vocab,
        config=config,
    )
