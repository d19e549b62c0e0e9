"""What made an artifact, as its manifest (and a lock's holder record) names it: the command being run
(`pretrain.program.run` records its argv here for the length of the call; work for another command
runs in `recorded(command)`) and the git state of the checkout this code runs from."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

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


def git_state() -> dict[str, Any]:
    """The commit and dirty flag of the checkout this code runs from (None outside git)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        run.check_returncode()
        return run.stdout.strip()

    try:
        commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "-uno")
        return {"commit": commit, "dirty": bool(status)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
