"""Learning-rate schedule: linear warmup, then cosine decay to a floor.

A function of the global optimizer step only, so it continues unchanged across a mixture phase
switch (where the sequence length changes) and across resumes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import OptimConfig


def warmup_steps(optim: OptimConfig, total_steps: int) -> int:
    if optim.warmup_steps is not None:
        return min(optim.warmup_steps, total_steps)
    return max(1, round(optim.warmup_fraction * total_steps)) if optim.warmup_fraction else 0


def lr_at(step: int, optim: OptimConfig, total_steps: int) -> float:
    """Learning rate of optimizer step `step` (0-based) of `total_steps`."""
    peak, floor = optim.lr, optim.lr * optim.min_lr_ratio
    warmup = warmup_steps(optim, total_steps)
    if step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))
