"""Running a Ray Dataset from the driver: to completion under a wall-clock guard, seeing each
output block as it arrives (the runner counts the stream's tagged rows from them)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pretrain.errors import PretrainError


def run(
    dataset: Any,
    timeout_s: float | None,
    on_block: Callable[[Any], None] | None = None,
    keep: bool = True,
) -> tuple[list[dict[str, Any]], str]:
    """Run the dataset to completion, with a wall-clock guard when a timeout is configured;
    `on_block` sees each output block as it arrives. With `keep` false no row is kept (the
    list returned is empty): the merge's rows carry records the driver folds, not holds."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                if on_block is not None:
                    on_block(block)
                if keep:
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
        cause = pretrain_cause(errors[0])
        if cause is not None:  # one line, as the task raised it
            raise type(cause)(str(cause)) from None
        raise errors[0]
    return result, dataset.stats()


def pretrain_cause(exc: BaseException) -> PretrainError | None:
    """The first of our errors in `exc`'s chain (a RayTaskError's `cause`, or what raised it):
    a worker's fence refusal, a changed piece; the user is owed its one line, not Ray's. The
    job's datasets raise their map functions' own errors (ray_job._original_errors): Ray Data's
    UserCodeException, pickled from the worker, no longer holds what it was raised from."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        cause = getattr(item, "cause", None)  # Ray's RayTaskError(OutputLocked) is one too
        if isinstance(item, PretrainError) and cause is None:
            return item
        todo += [cause, item.__cause__, item.__context__]
    return None


class Tally:
    """Rows tagged so far, from the stream's output blocks as the driver receives them (one row
    per piece written: its rows). Ray hands each output over once, whichever worker made it: a
    task retried, an actor restarted or an object rebuilt after a node died is not counted
    twice, and a worker that died leaves nothing behind to count."""

    def __init__(self) -> None:
        self.rows = 0

    def add(self, block: Any) -> None:
        self.rows += sum(block.column("rows").to_pylist()) if block.num_rows else 0
