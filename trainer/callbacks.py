"""Named events of `Trainer.fit()` (trainer/loop.py) and the list that calls them in order.

A callback overrides the events it cares about; every event has a no-op default. The trainer
calls, on every rank:

    on_fit_start                       before resuming
    on_resume(event)                   after loading the newest valid checkpoint
    on_checkpoint_skipped(entry)       a corrupt checkpoint passed over (rank 0's finding)
    on_step_start(step)                before the forward pass of step `step` (1-based)
    on_loss(loss) -> loss              each micro-batch's loss before backward
    check_step(result) -> reason|None  a reason rolls the step back (the spike guard)
    on_checkpoint(step, seconds)       after a checkpoint save was started or written
    on_step_end(record)                a good step, its metrics.jsonl record (mutable)
    on_rollback(event, restored)       after restoring the last good checkpoint
    on_eval(record)                    an evaluation's metrics record
    on_fit_end                         after the last step, before the run's outputs are written

The built-in ones (trainer/metrics.py, trainer/guard.py, trainer/periodic_eval.py) run in the
order the trainer lists them: guard, throughput, metrics log, periodic eval, then the callbacks a
caller passes (tests install fault injection this way: tests/trainer/faults.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from trainer.config import TrainConfig
    from trainer.step import StepResult, TrainState


class TrainerView(Protocol):
    """What a callback sees of the trainer (trainer/loop.py's `Trainer` is the one there is)."""

    config: TrainConfig
    run_dir: Path
    rank: int
    state: TrainState
    total_steps: int
    callbacks: CallbackList


class Callback:
    """Base class: every event is a no-op."""

    def on_fit_start(self, trainer: TrainerView) -> None:
        pass

    def on_resume(self, trainer: TrainerView, event: dict[str, Any]) -> None:
        pass

    def on_checkpoint_skipped(self, trainer: TrainerView, entry: dict[str, Any]) -> None:
        pass

    def on_step_start(self, trainer: TrainerView, step: int) -> None:
        pass

    def on_loss(self, trainer: TrainerView, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def check_step(self, trainer: TrainerView, result: StepResult) -> str | None:
        return None

    def on_checkpoint(self, trainer: TrainerView, step: int, seconds: float) -> None:
        pass

    def on_step_end(self, trainer: TrainerView, record: dict[str, Any]) -> None:
        pass

    def on_rollback(
        self, trainer: TrainerView, event: dict[str, Any], restored: dict[str, Any]
    ) -> None:
        pass

    def on_eval(self, trainer: TrainerView, record: dict[str, Any]) -> None:
        pass

    def on_fit_end(self, trainer: TrainerView) -> None:
        pass


class CallbackList(Callback):
    """Calls each event on every callback in order (check_step: the first reason wins)."""

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        self.items = list(callbacks)

    def _each(self, event: str, *args: Any) -> None:
        for callback in self.items:
            getattr(callback, event)(*args)

    def on_fit_start(self, trainer: TrainerView) -> None:
        self._each("on_fit_start", trainer)

    def on_resume(self, trainer: TrainerView, event: dict[str, Any]) -> None:
        self._each("on_resume", trainer, event)

    def on_checkpoint_skipped(self, trainer: TrainerView, entry: dict[str, Any]) -> None:
        self._each("on_checkpoint_skipped", trainer, entry)

    def on_step_start(self, trainer: TrainerView, step: int) -> None:
        self._each("on_step_start", trainer, step)

    def on_loss(self, trainer: TrainerView, loss: torch.Tensor) -> torch.Tensor:
        for callback in self.items:
            loss = callback.on_loss(trainer, loss)
        return loss

    def check_step(self, trainer: TrainerView, result: StepResult) -> str | None:
        reasons = (callback.check_step(trainer, result) for callback in self.items)
        return next((reason for reason in reasons if reason is not None), None)

    def on_checkpoint(self, trainer: TrainerView, step: int, seconds: float) -> None:
        self._each("on_checkpoint", trainer, step, seconds)

    def on_step_end(self, trainer: TrainerView, record: dict[str, Any]) -> None:
        self._each("on_step_end", trainer, record)

    def on_rollback(
        self, trainer: TrainerView, event: dict[str, Any], restored: dict[str, Any]
    ) -> None:
        self._each("on_rollback", trainer, event, restored)

    def on_eval(self, trainer: TrainerView, record: dict[str, Any]) -> None:
        self._each("on_eval", trainer, record)

    def on_fit_end(self, trainer: TrainerView) -> None:
        self._each("on_fit_end", trainer)
