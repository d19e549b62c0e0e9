"""Loss-spike guard (a trainer callback): `check_step` judges every step against the recent history;
on a verdict the trainer rolls back to the last good checkpoint and skips the batches, and
`rolled_back()` raises past `max_rollbacks`. Its `state()` is saved in every checkpoint."""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import TYPE_CHECKING, Any

from pretrain.errors import PretrainError
from trainer.callbacks import Callback

if TYPE_CHECKING:
    from trainer.config import GuardConfig
    from trainer.loop import Trainer
    from trainer.step import StepResult


class GuardGaveUp(PretrainError):
    """The run kept spiking after the allowed number of rollbacks."""


class SpikeGuard(Callback):
    """Running window of good steps' loss and grad norm; flags NaN/inf and spikes."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.load_state(None)

    def load_state(self, state: dict[str, Any] | None) -> None:
        """The whole guard as a checkpoint recorded it (None: a fresh run)."""
        state = state or {}
        self.restore_history(state)
        self.rollbacks: int = int(state.get("rollbacks", 0))
        self.events: list[dict[str, Any]] = list(state.get("events", []))

    def restore_history(self, state: dict[str, Any]) -> None:
        """The loss / grad-norm windows only (a rollback keeps its own rollback count)."""
        window = self.config.window
        self.losses: deque[float] = deque(state.get("losses", []), maxlen=window)
        self.grad_norms: deque[float] = deque(state.get("grad_norms", []), maxlen=window)

    def check_step(self, trainer: Trainer, result: StepResult) -> str | None:
        """The callback event: the reason to roll back, or None (and the step joins the history)."""
        warming_up = trainer.state.step < trainer.config.optim.warmup_for(trainer.total_steps)
        reason = self.check(result.loss, result.grad_norm, warming_up)
        if reason is None:
            self.record(result.loss, result.grad_norm)
        return reason

    def on_rollback(
        self, trainer: Trainer, event: dict[str, Any], restored: dict[str, Any]
    ) -> None:
        self.restore_history(restored.get("guard") or {})

    def check(self, loss: float, grad_norm: float, warming_up: bool = False) -> str | None:
        """The reason this step is bad (None when it is fine). NaN / inf always; the spike ratios
        with `min_history` good steps to compare with, the grad-norm ratio only past the LR
        warmup: while the LR rises, and in the first steps after it, the grad norm of a healthy
        proxy at its high LR moves by more than 10x (a 5M proxy at 3e-3 rolled back at step 12
        to step 1). A loss at twice its running median is a divergence at any LR."""
        if not self.config.enabled:
            return None
        if not math.isfinite(loss):
            return f"loss is {loss}"
        if not math.isfinite(grad_norm):
            return f"grad norm is {grad_norm}"
        if len(self.losses) < self.config.min_history:
            return None
        median_loss = statistics.median(self.losses)
        if loss > self.config.loss_spike_ratio * median_loss:
            return (
                f"loss {loss:.4g} > {self.config.loss_spike_ratio} x running median "
                f"{median_loss:.4g}"
            )
        median_norm = statistics.median(self.grad_norms)
        ratio = self.config.grad_norm_spike_ratio
        if not warming_up and median_norm > 0 and grad_norm > ratio * median_norm:
            return f"grad norm {grad_norm:.4g} > {ratio} x running median {median_norm:.4g}"
        return None

    def record(self, loss: float, grad_norm: float) -> None:
        """Add a good step to the history."""
        self.losses.append(float(loss))
        self.grad_norms.append(float(grad_norm))

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
        }
