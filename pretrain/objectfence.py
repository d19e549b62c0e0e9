"""Fencing of an `s3://` output: no write from a writer whose lock is no longer its own.

A holder frozen longer than its lease (SIGSTOP, a VM pause, a long GC) wakes up after another
writer took its lock over (pretrain.objectlock). Before every write or delete under the output
(`pretrain.outstore.ObjectPath` calls `fence`), in every process of the job:

- the driver, which holds the lock, renews it first unless its last renewal is younger than
  `lease_s / 3` on this process's monotonic clock (which runs on while the process is stopped); a
  renewal refused because the lock changed refuses the write in one line (`OutputLocked`, "lost
  its writer lock") and stops the run;
- a worker (a Ray task writing parts) holds no lock: it writes under its driver's, which it knows
  by id from the `ObjectPath`s in its task's arguments: pickled by the driver while it holds the
  lock, each carries the lock's id (`token_for`), and unpickling one adopts it (`adopt`) for
  every path under that output in the worker process. The data job hands every task that
  writes or deletes under its output an `ObjectPath`, never the URI's string: the stream's read
  tasks and map actors, the global stages' map and join tasks, the dedup exchange's producers
  (`Runner.exchange`), the merge tasks (tests/data_pipeline/test_s3_fence.py). So the fence holds
  whatever Ray the driver runs on: one it started, a cluster it joined by address, or one
  already initialised in its process (a notebook's `ray.init()`), whose workers were started
  before the lock and never see this driver's environment. A second way in, for a worker
  handed a bare string: `PRETRAIN_WRITER_LOCK`, which the driver sets while it holds the lock
  (a local Ray it starts inherits it; a job on an existing cluster gets it through the job's
  runtime_env, `rayinit.with_driver_env`). Before writing, a worker reads the lock object and
  writes only if it still has that id and its lease has not run out; the answer holds for half
  the lease it had left, so a worker reads the lock about once per lease / 2.

What remains: a writer frozen in the instant between its check and the request it guards still
lands that one request (S3 has no write conditional on another object); a lock removed by hand
(`pretrain unlock`) before its lease ran out is seen by a worker only once its last answer
stops holding (at most lease / 2 later); code outside the data job that hands its own tasks a
URI string is fenced only through the environment variable.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from pretrain import lockobject, objectlock
from pretrain.errors import OutputLocked


@dataclass
class _Adopted:
    """A driver's lock, as a worker process knows it: where it is and the id it must have."""

    output: str
    ident: str
    target: lockobject.Target
    client: Any
    safe_until: float = 0.0  # monotonic time until which the last check holds


_adopted: dict[str, _Adopted] = {}  # clean output URI -> a driver's lock a worker writes under


def _covering(table: dict[str, Any], uri: str) -> Any:
    for output, entry in table.items():
        if uri == output or uri.startswith(output.rstrip("/") + "/"):
            return entry
    return None


def token_for(uri: str) -> tuple[str, str] | None:
    """(output, lock id) of the lock this process holds, or writes under, covering `uri`: what
    an `ObjectPath` carries to a worker."""
    with objectlock._registry:
        lock = _covering(objectlock._held, uri)
        if lock is not None:
            return lock.output, str(lock.record["id"])
        adopted = _covering(_adopted, uri)
    return (adopted.output, adopted.ident) if adopted is not None else None


def adopt(token: tuple[str, str]) -> None:
    """Write under the lock `token` names (a worker unpickling a driver's `ObjectPath`)."""
    output, ident = token
    target = lockobject.target_of(output)
    with objectlock._registry:
        known = _adopted.get(target.output)
        if target.output in objectlock._held or (known is not None and known.ident == ident):
            return
    adopted = _Adopted(output, ident, target, lockobject.client_for(target))
    with objectlock._registry:
        _adopted[target.output] = adopted


def _adopt_inherited() -> None:
    text = os.environ.get(objectlock.FENCE_ENV)
    if not text:
        return
    try:
        token = json.loads(text)
        output, ident = str(token["output"]), str(token["id"])
    except (ValueError, KeyError, TypeError):
        return  # not ours to judge; the driver sets it
    adopt((output, ident))


def fence(uri: str) -> None:
    """Raise `OutputLocked` when a write or delete of `uri` would come from a writer whose lock
    is no longer its own; nothing for an output no lock of this job covers."""
    with objectlock._registry:
        lock = _covering(objectlock._held, uri)
        adopted = None if lock is not None else _covering(_adopted, uri)
    if lock is None and adopted is None and os.environ.get(objectlock.FENCE_ENV):
        _adopt_inherited()
        with objectlock._registry:
            adopted = _covering(_adopted, uri)
    if lock is not None:
        lock.fence()
    elif adopted is not None:
        _check(adopted)


def _check(adopted: _Adopted) -> None:
    sent = time.monotonic()
    if sent < adopted.safe_until:
        return
    seen = lockobject.read_lock(adopted.client, adopted.target)
    ident = (seen.record or {}).get("id") if seen is not None else None
    if seen is None or ident != adopted.ident or seen.age_s >= lockobject.holder_lease(seen):
        state = "expired or removed"
        if seen is not None and ident != adopted.ident:
            state = f"now held by {lockobject.describe(seen)}"
        raise OutputLocked(
            f"stopped writing {adopted.target.output} from a worker: its job's writer lock "
            f"{adopted.target.uri} (id {adopted.ident}) is {state}; another writer may now "
            "write it: re-run once that one has finished"
        )
    adopted.safe_until = sent + (lockobject.holder_lease(seen) - seen.age_s) / 2
