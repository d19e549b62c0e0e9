"""Processes end with their owner: a child asks the kernel to kill it when its parent dies.

`die_with_parent()` (in the child) or `preexec_fn=die_with_parent` (for a child we start with
`subprocess`) sets Linux's `PR_SET_PDEATHSIG` to SIGKILL. It survives `exec`, so it covers a
torchrun agent we start, and each training rank sets it for itself (torchrun starts ranks in a new
session, out of reach of a signal to the launcher's process group). Elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Get SIGKILL when the parent process exits; True when set. When the parent is already gone
    (reparented before we asked, or not `expected_parent`), exit now."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    parent = os.getppid()
    if parent == 1 or (expected_parent is not None and parent != expected_parent):
        os._exit(1)
    return True
