"""The command behind an artifact: `pretrain.program.run` records its argv here for the length of the
call, writers read it with `current_command()`; work for another command runs in `recorded(command)`."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

_captured: list[tuple[str, ...]] = []


def current_command() -> list[str]:
    """The `pretrain ...` command being run; outside the CLI, this process's own command line."""
    if _captured:
        return list(_captured[-1])
    return list(sys.argv)


@contextmanager
def recorded(command: Sequence[str]) -> Iterator[None]:
    """Record `command` (the whole command line) as the current one until the block exits."""
    _captured.append(tuple(command))
    try:
        yield
    finally:
        _captured.pop()


def capture(argv: Sequence[str]) -> AbstractContextManager[None]:
    """Record `pretrain ARGV...` as the current command until the block exits (calls nest)."""
    return recorded(("pretrain", *argv))
