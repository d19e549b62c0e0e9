"""A per-document CPU-time limit that works on any thread and does not depend on machine load.

The limit counts the CPU time of the calling thread (its POSIX per-thread CPU clock), not wall
time: a document waiting for a busy core uses none of its budget, so the same input hits (or
does not hit) the limit at any worker count and any load, and the shards do not change with
them. A watchdog thread sleeps until the budget could at the earliest be spent (a thread cannot
use more CPU time than wall time), re-reads the clock, and when the budget is spent raises
`TimeLimitExceeded` in the working thread with `PyThreadState_SetAsyncExc`. That interrupts
Python code at the next bytecode boundary: long pure-C calls finish first (which is why the
extract stage also caps input size before parsing).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

POLL_FLOOR_S = 0.002
"""Shortest sleep between two reads of a thread's clock."""


class TimeLimitExceeded(BaseException):
    """Raised inside the code under `time_limit` when its CPU time is up.

    A BaseException, like KeyboardInterrupt, so library code that catches `Exception` (Trafilatura
    does, around lxml) cannot swallow it."""


class _Watchdog:
    """One daemon thread per process; each armed thread has a CPU clock and a CPU deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[int, float]] = {}
        self._wake = threading.Event()
        threading.Thread(target=self._run, name="cpu-time-watchdog", daemon=True).start()

    def arm(self, thread_id: int, seconds: float) -> None:
        clock = time.pthread_getcpuclockid(thread_id)
        with self._lock:
            self._armed[thread_id] = (clock, time.clock_gettime(clock) + seconds)
        self._wake.set()

    def disarm(self, thread_id: int) -> bool:
        """Stop watching; True if the limit already fired (its exception may still be pending)."""
        with self._lock:
            return self._armed.pop(thread_id, None) is None

    def _run(self) -> None:
        while True:
            wait: float | None = None
            with self._lock:
                for thread_id, (clock, deadline) in list(self._armed.items()):
                    try:
                        left = deadline - time.clock_gettime(clock)
                    except OSError:  # the thread ended without disarming
                        del self._armed[thread_id]
                        continue
                    if left <= 0:
                        del self._armed[thread_id]
                        _raise_in(thread_id, TimeLimitExceeded)
                    else:
                        wait = left if wait is None else min(wait, left)
            self._wake.wait(timeout=None if wait is None else max(wait, POLL_FLOOR_S))
            self._wake.clear()


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None
    )


_WATCHDOG: _Watchdog | None = None
_WATCHDOG_LOCK = threading.Lock()


def _watchdog() -> _Watchdog:
    global _WATCHDOG
    with _WATCHDOG_LOCK:
        if _WATCHDOG is None:
            _WATCHDOG = _Watchdog()
        return _WATCHDOG


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeLimitExceeded in the enclosed code once this thread used `seconds` of CPU."""
    watchdog, thread_id = _watchdog(), threading.get_ident()
    watchdog.arm(thread_id, seconds)
    try:
        yield
    finally:
        if watchdog.disarm(thread_id):
            _raise_in(thread_id, None)  # cancel an exception that fired but was not delivered
