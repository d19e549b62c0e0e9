"""A per-document time limit that works on any thread.

On the main thread it uses SIGALRM. Ray Data runs actor methods on a worker thread, where signals
cannot be used, so there a watchdog thread raises `TimeLimitExceeded` in the working thread with
`PyThreadState_SetAsyncExc`. Both interrupt Python code at the next bytecode boundary: long pure-C
calls finish first (which is why the extract stage also caps input size before parsing).
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class TimeLimitExceeded(BaseException):
    """Raised inside the code under `time_limit` when its time is up.

    A BaseException, like KeyboardInterrupt, so library code that catches `Exception` (Trafilatura
    does, around lxml) cannot swallow it."""


class _Watchdog:
    """One daemon thread per process; each armed thread has a deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadlines: dict[int, float] = {}
        self._wake = threading.Event()
        threading.Thread(target=self._run, name="time-limit-watchdog", daemon=True).start()

    def arm(self, thread_id: int, seconds: float) -> None:
        with self._lock:
            self._deadlines[thread_id] = time.monotonic() + seconds
        self._wake.set()

    def disarm(self, thread_id: int) -> bool:
        """Stop watching; True if the limit already fired (its exception may still be pending)."""
        with self._lock:
            return self._deadlines.pop(thread_id, None) is None

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                for thread_id, deadline in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[thread_id]
                        _raise_in(thread_id, TimeLimitExceeded)
                wait = min((d - now for d in self._deadlines.values()), default=None)
            self._wake.wait(timeout=None if wait is None else max(wait, 0.001))
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
def _thread_limit(seconds: float) -> Iterator[None]:
    watchdog, thread_id = _watchdog(), threading.get_ident()
    watchdog.arm(thread_id, seconds)
    try:
        yield
    finally:
        if watchdog.disarm(thread_id):
            _raise_in(thread_id, None)  # cancel an exception that fired but was not delivered


@contextmanager
def _signal_limit(seconds: float) -> Iterator[None]:
    def _raise(signum: int, frame: Any) -> None:
        raise TimeLimitExceeded

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def time_limit(seconds: float) -> Any:
    """Context manager: raise TimeLimitExceeded in the enclosed code after `seconds`."""
    if threading.current_thread() is threading.main_thread():
        return _signal_limit(seconds)
    return _thread_limit(seconds)
