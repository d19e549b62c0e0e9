"""A per-document CPU-time limit that no call can outrun: the work runs in a killable child process.

The budget is the child's own CPU clock (clock_getcpuclockid), not wall time, so the same input
hits the limit at any load and worker count and the shards do not change with them; over it, the
child is SIGKILLed whatever it is doing (a long C call included) and a fresh one serves the next
document. Orphaned, the child still stops: it sets its own RLIMIT_CPU before each document.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

POLL_FLOOR_S = 0.002
"""Shortest wait between two reads of the child's clock."""


_children_cpu_s = 0.0
"""CPU-seconds this process's document workers spent on documents (see `cpu_time`)."""


def cpu_time() -> float:
    """`time.process_time()` plus what this process's document workers spent on documents: the
    CPU cost of the work a stage did, wherever it ran (data_pipeline.throughput)."""
    return time.process_time() + _children_cpu_s


class TimeLimitExceeded(Exception):
    """The document used more CPU time than its limit (its child was killed if still busy)."""


class DocumentFailed(Exception):
    """The work raised on this document, or its child died (a crash in C); the message says which."""


class DocumentWorker:
    """Calls `factory(*args)(*document)` in a child process, one document at a time, each under a
    CPU-time limit of `seconds`. Thread-safe (calls are serialised); `close()` ends the child."""

    def __init__(self, factory: Callable[..., Callable[..., Any]], *args: Any, seconds: float):
        self._setup = pickle.dumps((factory, args, seconds))
        self._seconds = seconds
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._clock = 0

    def __call__(self, *document: Any) -> Any:
        global _children_cpu_s
        with self._lock:
            conn = self._start()
            start = time.clock_gettime(self._clock)
            conn.send(document)
            status, value = self._wait(conn, start)
            if self._conn is None:  # killed at the limit, or died
                used = self._seconds if status == "timeout" else 0.0
            else:
                used = time.clock_gettime(self._clock) - start
                if used > self._seconds:  # finished, but too late: the same verdict
                    status = "timeout"
            _children_cpu_s += used
            if status == "timeout":
                raise TimeLimitExceeded(f"over {self._seconds} CPU-s")
            if status == "error":
                raise DocumentFailed(value)
            return value

    def _wait(self, conn: Connection, start: float) -> tuple[str, Any]:
        """The child's reply, or ("timeout", None) after killing it at the limit."""
        while True:
            left = start + self._seconds - time.clock_gettime(self._clock)
            if left <= 0:
                self.close()
                return "timeout", None
            # A process cannot use more CPU time than wall time per thread: sleep until the
            # budget could at the earliest be spent, then re-read the clock.
            if conn.poll(max(left, POLL_FLOOR_S)):
                break
        try:
            return conn.recv()
        except (EOFError, OSError):
            code = self._child.wait() if self._child else None
            self.close()
            return "error", f"the worker process died (exit {code})"

    def _start(self) -> Connection:
        if self._conn is not None:
            return self._conn
        ours, theirs = socket.socketpair()
        # The child imports what the parent can: the same sys.path (a Ray worker's may hold a
        # runtime_env's packages that PYTHONPATH does not name).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._child = subprocess.Popen(
            [sys.executable, "-m", "data_pipeline.timelimit", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self._clock = _process_cpu_clock(self._child.pid)
        self._conn.send_bytes(self._setup)
        status, value = self._conn.recv()
        if status == "error":
            self.close()
            raise RuntimeError(f"document worker setup failed: {value}")
        return self._conn

    def close(self) -> None:
        """Kill the child (if any); the next call starts a fresh one."""
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self) -> None:
        # At interpreter shutdown this may fail: the child exits on its own when its socket closes.
        with contextlib.suppress(Exception):
            self.close()


def _process_cpu_clock(pid: int) -> int:
    """POSIX clock_getcpuclockid (the time module has only the per-thread variant)."""
    clock = ctypes.c_int()
    error = ctypes.CDLL(None).clock_getcpuclockid(pid, ctypes.byref(clock))
    if error:
        raise OSError(error, os.strerror(error))
    return clock.value


def _serve(fd: int) -> None:
    """The child: build the work once, then answer one document per request until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    try:
        factory, args, seconds = pickle.loads(conn.recv_bytes())
        work = factory(*args)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", None))
    while True:
        try:
            document = conn.recv()
        except EOFError:
            return
        # The kernel's backstop (SIGXCPU) in case the parent cannot kill us: 2 s past the budget.
        limit = int(time.process_time() + seconds) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.RLIM_INFINITY))
        try:
            reply = ("ok", work(*document))
        except Exception as exc:  # one document's failure is that document's reject
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
