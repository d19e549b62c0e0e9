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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trainer.loop import Trainer
    from trainer.step import StepResult


class Callback:
    """Base class: every event is a no-op."""

    def on_fit_start(self, trainer: Trainer) -> None:
        pass

    def on_resume(self, trainer: Trainer, event: dict[str, Any]) -> None:
        pass

    def on_checkpoint_skipped(self, trainer: Trainer, entry: dict[str, Any]) -> None:
        pass

    def on_step_start(self, trainer: Trainer, step: int) -> None:
        pass

    def on_loss(self, trainer: Trainer, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def check_step(self, trainer: Trainer, result: StepResult) -> str | None:
        return None

    def on_checkpoint(self, trainer: Trainer, step: int, seconds: float) -> None:
        pass

    def on_step_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        pass

    def on_rollback(
        self, trainer: Trainer, event: dict[str, Any], restored: dict[str, Any]
    ) -> None:
        pass

    def on_eval(self, trainer: Trainer, record: dict[str, Any]) -> None:
        pass

    def on_fit_end(self, trainer: Trainer) -> None:
        pass


class CallbackList(Callback):
    """Calls each event on every callback in order (on_loss: chained; check_step: the first
    reason wins). Every other event of `Callback` is forwarded as it is (below the class)."""

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        self.items = list(callbacks)

    def on_loss(self, trainer: Trainer, loss: torch.Tensor) -> torch.Tensor:
        for callback in self.items:
            loss = callback.on_loss(trainer, loss)
        return loss

    def check_step(self, trainer: Trainer, result: StepResult) -> str | None:
        reasons = (callback.check_step(trainer, result) for callback in self.items)
        return next((reason for reason in reasons if reason is not None), None)


def _forward(event: str) -> Any:
    def each(self: CallbackList, *args: Any) -> None:
        for callback in self.items:
            getattr(callback, event)(*args)

    return each


for _event in [name for name in vars(Callback) if name.startswith("on_") and name != "on_loss"]:
    setattr(CallbackList, _event, _forward(_event))
