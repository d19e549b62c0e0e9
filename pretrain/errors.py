"""Errors a user can fix, and finding them behind the errors Ray and the OS raise. Each prints as one
line naming the field or file, the value and the fix (`pretrain.program.run`); anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from typing import Any

_RAY_RETRY_NOTE = re.compile(
    r"\s*Failed to [^\n]{1,200}? after \d+/\d+ attempts \(total backoff [0-9.]+s\)\."
    r".*?if you believe this to be transient\.",
    re.S,
)
"""What Ray Data (2.60) appends to a map task's error, raised in a worker and rebuilt from its
message in the driver: advice on retrying, which a refusal is not."""


class PretrainError(Exception):
    """A user-fixable failure: the CLI prints its message on one line and exits 2."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(_RAY_RETRY_NOTE.sub("", message).split()))


class ConfigError(PretrainError):
    """A config file or `--set` override is invalid."""


class SchemaError(PretrainError):
    """A table does not match the document schema."""


class ArtifactError(PretrainError):
    """An artifact is missing, tampered with, or not the kind a command needs."""


class LockMismatch(ArtifactError):
    """Two artifacts name different tokenizer, mixture or data hashes."""


class InputError(PretrainError):
    """A raw input file cannot be read at all (not a per-document reject)."""


class GateRefused(PretrainError):
    """A full-size launch was not cleared by an ablation report."""


class OutputLocked(PretrainError):
    """Another live process (on this machine, or for an object store on any) writes the same
    output (pretrain.locking)."""


_FULL = (
    "free space (or raise the quota / file-size limit) and run the same command again: files "
    "are written whole or not at all, and what was finished is reused"
)
USER_ERRNOS = {
    errno.ENOSPC: _FULL,
    errno.EDQUOT: _FULL,
    errno.EFBIG: _FULL,
    errno.EROFS: "the file system is read-only: choose an output on a writable one",
}
"""What the OS refused that is the user's to fix, not a bug, and what to do about each."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the errors behind it, nearest first: a Ray task error's `cause` (Ray's
    RayTaskError(OutputLocked) is one too), `__cause__` and `__context__`."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [getattr(item, "cause", None), item.__cause__, item.__context__]


def pretrain_cause(exc: BaseException) -> PretrainError | None:
    """The first of our errors in `exc`'s chain: the user is owed a worker's one-line refusal, not
    Ray's many lines."""
    for item in _chain(exc):
        if isinstance(item, PretrainError) and getattr(item, "cause", None) is None:
            return item
    return None


def raise_pretrain_cause(exc: BaseException) -> None:
    """Raise the first of our errors in `exc`'s chain as its one line, if there is one."""
    if (cause := pretrain_cause(exc)) is not None:
        raise type(cause)(str(cause)) from None


def ray_get(ray: Any, refs: list[Any], timeout: float | None, timed_out: Exception) -> list[Any]:
    """`ray.get(refs)` that raises `timed_out` after `timeout` seconds instead of hanging; a task's
    own PretrainError (a changed file, a refusal) is raised as its one line, not Ray's many."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise timed_out from None
    except ray.exceptions.RayTaskError as exc:
        raise_pretrain_cause(exc)
        raise


def os_refusal(exc: BaseException) -> OSError | None:
    """The user-fixable OSError (USER_ERRNOS) in `exc`'s chain, else None."""
    for item in _chain(exc):
        if isinstance(item, OSError) and item.errno in USER_ERRNOS:
            return item
        if (quoted := _quoted_refusal(item)) is not None:
            return quoted
    return None


_QUOTED = re.compile(r"^OSError: \[Errno (\d+)\] ([^:\n]+)(?:: '([^'\n]+)')?$", re.MULTILINE)


def _quoted_refusal(exc: BaseException) -> OSError | None:
    """The OSError a Ray error holds only as text: an actor whose __init__ failed dies with an
    ActorDiedError that keeps the worker's traceback as its message, not the exception."""
    if not type(exc).__module__.startswith("ray."):
        return None
    found = [m for m in _QUOTED.finditer(str(exc)) if int(m[1]) in USER_ERRNOS]
    return OSError(int(found[-1][1]), found[-1][2], found[-1][3]) if found else None
