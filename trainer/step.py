"""One optimizer step's mechanics below the loop (learning rate, megatron's schedule, the loss and
counts reduced over the world, the update norm) and `next_token_logprobs` outside training."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from trainer.config import OptimConfig

LossHook = Callable[[torch.Tensor], torch.Tensor]
"""Applied to each micro-batch's loss before backward (the callbacks' `on_loss`)."""


@dataclass
class TrainState:
    """What a checkpoint must hold besides weights and optimizer state to resume exactly."""

    step: int = 0
    batch: int = 0
    tokens_seen: int = 0
    tokens_per_component: list[int] = field(default_factory=list)
    sequences_per_component: list[int] = field(default_factory=list)
    skipped_batches: list[int] = field(default_factory=list)


@dataclass
class StepResult:
    loss: float
    grad_norm: float
    update_norm: float | None
    timings: dict[str, float]
    batch: int


def lr_at(step: int, optim: OptimConfig, total_steps: int) -> float:
    """Learning rate of optimizer step `step` (0-based) of `total_steps`: linear warmup, then
    cosine decay to min_lr_ratio * lr. A function of the global step only, so it continues
    unchanged across a mixture phase switch (the sequence length changes) and across resumes."""
    peak, floor = optim.lr, optim.lr * optim.min_lr_ratio
    warmup = optim.warmup_for(total_steps)
    if step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def _forward_step_func(loss_hook: LossHook | None) -> Callable[[Any, Any], Any]:
    """Megatron's `forward_step_func`: next micro-batch -> (output, loss function)."""

    def forward_step(iterator: Any, model: Any) -> tuple[torch.Tensor, Any]:
        inputs, positions, labels = _shifted(next(iterator))
        output = model(inputs, positions, None, labels=labels)

        def loss_func(output_tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
            loss = output_tensor.float().mean()
            if loss_hook is not None:
                loss = loss_hook(loss)
            return loss, {"loss": loss.detach().clone()}

        return output, loss_func

    return forward_step


def run_schedule(
    model: Any,
    tokens: np.ndarray,
    micro_batch_size: int,
    num_microbatches: int,
    forward_only: bool,
    loss_hook: LossHook | None = None,
) -> list[dict[str, torch.Tensor]]:
    """Forward (and backward unless forward_only) over the global batch's micro-batches."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    micro_batches = torch.from_numpy(tokens).split(micro_batch_size)
    return get_forward_backward_func()(
        forward_step_func=_forward_step_func(loss_hook),
        data_iterator=iter(micro_batches),
        model=model,
        num_microbatches=num_microbatches,
        seq_length=tokens.shape[1] - 1,
        micro_batch_size=micro_batch_size,
        forward_only=forward_only,
    )


def reduce_loss(losses: list[dict[str, torch.Tensor]], ps: Any, dp_size: int) -> float:
    """Mean loss over the global batch, identical on every rank."""
    contributes = ps.is_pipeline_last_stage() and ps.get_tensor_model_parallel_rank() == 0
    value = sum(float(x["loss"]) for x in losses) / len(losses) if contributes and losses else 0.0
    total = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(total)
    return float(total.item()) / dp_size


def component_counts(components: np.ndarray, num_components: int, ps: Any) -> list[int]:
    """Sequences per mixture component in this global batch, summed over the data ranks."""
    counts = np.bincount(components, minlength=num_components)
    first = ps.get_tensor_model_parallel_rank() == 0 and ps.is_pipeline_first_stage()
    total = torch.from_numpy((counts if first else np.zeros_like(counts)).astype(np.float64))
    torch.distributed.all_reduce(total)
    return [int(value) for value in total.tolist()]


def update_norm(model: Any, before: list[torch.Tensor], dp_size: int) -> float:
    """L2 norm of this step's parameter update over the whole model."""
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    square = sum(
        float((p.detach().float() - b.float()).pow(2).sum())
        for p, b in zip(model.parameters(), before, strict=True)
        if param_is_not_tensor_parallel_duplicate(p)
    )
    total = torch.tensor([square], dtype=torch.float64)
    torch.distributed.all_reduce(total)
    return float((total.item() / dp_size) ** 0.5)


def count_params(model: Any, dp_size: int) -> int:
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    local = sum(p.numel() for p in model.parameters() if param_is_not_tensor_parallel_duplicate(p))
    total = torch.tensor([float(local)])
    torch.distributed.all_reduce(total)
    return int(total.item() / dp_size)


@torch.no_grad()
def next_token_logprobs(model: Any, tokens: Any) -> torch.Tensor:
    """A GPTModel's log p(tokens[:, t+1] | tokens[:, :t+1]) at every position, on the CPU:
    FloatTensor[B, S-1] (a loaded checkpoint's, and the live model's during training)."""
    from trainer.cpu_compat import device_context

    tokens = torch.as_tensor(tokens, dtype=torch.long)
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be [batch, seq >= 2], got {tuple(tokens.shape)}")
    inputs, positions, labels = _shifted(tokens.to(next(model.parameters()).device))
    with device_context():
        loss = model(inputs, positions, None, labels=labels)
    return -loss.float().cpu()


def _shifted(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GPTModel's (inputs, positions, labels) to predict tokens[:, 1:] from what precedes."""
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    positions = torch.arange(inputs.shape[1], device=inputs.device).unsqueeze(0)
    return inputs, positions.expand_as(inputs), labels
