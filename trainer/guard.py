"""Loss-spike guard: decide from the loss and grad-norm history whether a step went bad.

Pure Python so it is testable without torch. The loop asks `check(loss, grad_norm)` after every
step; on a verdict it rolls back to the last good checkpoint, skips the offending batches and
calls `rolled_back()`, which raises once the config's `max_rollbacks` is exceeded.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from pretrain.errors import PretrainError
from trainer.config import GuardConfig


class GuardGaveUp(PretrainError):
    """The run kept spiking after the allowed number of rollbacks."""


class SpikeGuard:
    """Running window of good steps' loss and grad norm; flags NaN/inf and spikes."""

    def __init__(self, config: GuardConfig, state: dict[str, Any] | None = None) -> None:
        self.config = config
        state = state or {}
        self.losses: deque[float] = deque(state.get("losses", []), maxlen=config.window)
        self.grad_norms: deque[float] = deque(state.get("grad_norms", []), maxlen=config.window)
        self.rollbacks: int = int(state.get("rollbacks", 0))
        self.events: list[dict[str, Any]] = list(state.get("events", []))
        self.nan_injected: bool = bool(state.get("nan_injected", False))

    def check(self, loss: float, grad_norm: float) -> str | None:
        """The reason this step is bad (None when it is fine)."""
        if not self.config.enabled:
            return None
        if not math.isfinite(loss):
            return f"loss is {loss}"
        if not math.isfinite(grad_norm):
            return f"grad norm is {grad_norm}"
        if len(self.losses) >= self.config.min_history:
            median_loss = statistics.median(self.losses)
            if loss > self.config.loss_spike_ratio * median_loss:
                return (
                    f"loss {loss:.4g} > {self.config.loss_spike_ratio} x running median "
                    f"{median_loss:.4g}"
                )
            median_norm = statistics.median(self.grad_norms)
            if median_norm > 0 and grad_norm > self.config.grad_norm_spike_ratio * median_norm:
                return (
                    f"grad norm {grad_norm:.4g} > {self.config.grad_norm_spike_ratio} x "
                    f"running median {median_norm:.4g}"
                )
        return None

    def record(self, loss: float, grad_norm: float) -> None:
        """Add a good step to the history."""
        self.losses.append(float(loss))
        self.grad_norms.append(float(grad_norm))

    def should_inject_nan(self, step: int) -> bool:
        """Testing aid: True once, at `inject_nan_at_step`."""
        if self.config.inject_nan_at_step == step and not self.nan_injected:
            self.nan_injected = True
            return True
        return False

    def rolled_back(
        self, step: int, reason: str, batches: list[int], samples: list[Any], to_step: int
    ) -> None:
        """Record a rollback; raise GuardGaveUp past max_rollbacks."""
        self.rollbacks += 1
        self.events.append(
            {
                "step": step,
                "reason": reason,
                "skipped_batches": batches,
                "sample_ids": samples,
                "rolled_back_to": to_step,
            }
        )
        if self.rollbacks > self.config.max_rollbacks:
            steps = ", ".join(str(e["step"]) for e in self.events)
            raise GuardGaveUp(
                f"guard.max_rollbacks = {self.config.max_rollbacks} exceeded: the loss spiked or "
                f"went NaN at steps {steps} (last: {reason}); lower optim.lr, raise "
                "optim.warmup_fraction or inspect the logged sample ids in metrics.jsonl"
            )

    def state(self) -> dict[str, Any]:
        return {
            "losses": list(self.losses),
            "grad_norms": list(self.grad_norms),
            "rollbacks": self.rollbacks,
            "events": self.events,
            "nan_injected": self.nan_injected,
        }
