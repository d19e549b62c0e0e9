"""Callbacks the trainer tests install (trainer_testlib.run_ranks `callbacks=`, by class name):
fault injection, so the production loop and config carry no testing aids, and an event recorder."""

from __future__ import annotations

import json
import os
from typing import Any

from trainer.callbacks import Callback

CRASH_EXIT_CODE = 17


class CrashAfterStep(Callback):
    """Exit abruptly (no cleanup, like a killed job) right after step `step` was logged."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer: Any, record: dict[str, Any]) -> None:
        if trainer.state.step == self.step:
            os._exit(CRASH_EXIT_CODE)


class NanLossAtStep(Callback):
    """Make every micro-batch loss of step `step` NaN, the first time that step runs."""

    def __init__(self, step: int) -> None:
        self.step, self.fired, self.active = step, False, False

    def on_step_start(self, trainer: Any, step: int) -> None:
        self.active = step == self.step and not self.fired
        self.fired = self.fired or self.active

    def on_loss(self, trainer: Any, loss: Any) -> Any:
        return loss * float("nan") if self.active else loss


class RecordEvents(Callback):
    """Append `[event, step]` per trainer event to a JSON-lines file (rank 0), to check the order."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _write(self, trainer: Any, name: str, step: int | None = None) -> None:
        if trainer.rank == 0:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps([name, trainer.state.step if step is None else step]))
                handle.write("\n")

    def on_fit_start(self, trainer: Any) -> None:
        self._write(trainer, "fit_start")

    def on_step_start(self, trainer: Any, step: int) -> None:
        self._write(trainer, "step_start", step)

    def on_checkpoint(self, trainer: Any, step: int, seconds: float) -> None:
        self._write(trainer, "checkpoint", step)

    def on_step_end(self, trainer: Any, record: dict[str, Any]) -> None:
        self._write(trainer, "step_end", record["step"])

    def on_rollback(self, trainer: Any, event: dict[str, Any], restored: dict[str, Any]) -> None:
        self._write(trainer, "rollback", event["to_step"])

    def on_fit_end(self, trainer: Any) -> None:
        self._write(trainer, "fit_end")
