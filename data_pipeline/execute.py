"""Running a Ray Dataset from the driver: to completion under a wall-clock guard, seeing each
output block as it arrives (the runner counts the stream's tagged rows from them)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pretrain.errors import PretrainError


def run(
    dataset: Any, timeout_s: float | None, on_block: Callable[[Any], None] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Run the dataset to completion, with a wall-clock guard when a timeout is configured;
    `on_block` sees each output block as it arrives."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                if on_block is not None:
                    on_block(block)
                result.extend(block.to_pylist())
        except BaseException as exc:  # re-raised in the driver thread below
            errors.append(exc)

    thread = threading.Thread(target=target, name="pipeline-execute", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise PretrainError(
            f"ray.timeout_s = {timeout_s}: the job did not finish in time; raise "
            "it, or check the cluster (`ray status`) for missing CPUs"
        )
    if errors:
        cause = getattr(errors[0], "cause", None)  # ray.exceptions.RayTaskError wraps the error
        if isinstance(cause, PretrainError):
            raise type(cause)(str(cause)) from None
        raise errors[0]
    return result, dataset.stats()


class Tally:
    """Rows tagged so far, from the stream's output blocks as the driver receives them (one row
    per piece written: its rows). Ray hands each output over once, whichever worker made it: a
    task retried, an actor restarted or an object rebuilt after a node died is not counted
    twice, and a worker that died leaves nothing behind to count."""

    def __init__(self) -> None:
        self.rows = 0

    def add(self, block: Any) -> None:
        self.rows += sum(block.column("rows").to_pylist()) if block.num_rows else 0
