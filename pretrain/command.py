"""The command behind an artifact, captured once where the `pretrain` program parses its argv.

Every manifest records the command that made it. `pretrain.program.run` (which
`pretrain_app.cli.main(argv)` and `python -m trainer|evals` call) captures `argv` here for the
length of the call (so an in-process `main([...])`, as a proxy run does, records its own
arguments, not the enclosing process's `sys.argv`); the artifact writers
(`pretrain.artifacts.base.write_artifact`) read it with `current_command()`. Work done on behalf of another
command (a training rank the launcher started, a demo step) runs inside `recorded(command)`.
"""

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
