"""Processes end with their owner: `die_with_parent` (Linux PR_SET_PDEATHSIG, kept across `exec`), and
SIGTERM stops a command as Ctrl-C does (`stop_on_sigterm`)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Get SIGKILL when the parent process exits; True when set. When the parent is already gone
    (reparented before we asked, or not `expected_parent`), exit now. Training ranks set it for
    themselves: torchrun starts them in a new session, out of reach of the launcher's group."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    parent = os.getppid()
    if parent == 1 or (expected_parent is not None and parent != expected_parent):
        os._exit(1)
    return True


class Terminated(BaseException):  # noqa: N818 (like KeyboardInterrupt: not an Exception)
    """SIGTERM arrived: the command unwinds as on Ctrl-C (its cleanup runs), then exits 143."""


def _raise_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one unwind; a second TERM does not cut it
    raise Terminated


def stop_on_sigterm() -> Any:
    """SIGTERM raises Terminated in the main thread; returns the handler it replaced. `ray.init`
    installs its own (`sys.exit(15)`, mid-cleanup): call this again after it."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_terminated)
