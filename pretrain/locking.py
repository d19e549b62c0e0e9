"""One writer per artifact: an exclusive `flock` on a lock file beside the output directory.

`with output_lock(out):` around everything a command writes into `out`. The lock file is
`PARENT/.<name>.lock`, next to the output rather than inside it, because several writers replace
their output wholesale (a staging directory renamed over it, or `rmtree` then rebuild): a lock
inside would be deleted with the directory and a second writer could lock a fresh file.

The lock file holds a JSON record of the holder (pid, host, start time, command), so a refused
writer can say who holds it. `flock` is released by the kernel when its holder dies, so a lock left
by a killed process is simply taken over (the stale record is replaced, and the takeover reported
on stderr). A writer that loses a race waits a moment (`SETTLE_S`) for the winner's record, so
its refusal names the live holder, never nobody or a dead one. The same process may re-enter a lock it holds (the demo and ablations call builders
that take their own locks on nested outputs).

`flock` holds on one machine only. An `s3://` output is locked by a lock object in the store
instead (pretrain.s3_lock: a conditional write, a heartbeat, a lease), which keeps out a writer
on any machine.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from pretrain.errors import ConfigError, OutputLocked
from pretrain.progress import warn
from pretrain.s3_lock import S3Lock, holder_record, holder_text

LOCK_SUFFIX = ".lock"


_held: dict[str, tuple[Any, int]] = {}  # lock path -> (fd, depth); s3:// output -> (S3Lock, depth)
_guard = threading.Lock()


def lock_path(out: str | os.PathLike) -> Path:
    """`PARENT/.<name>.lock` for output directory `PARENT/<name>`."""
    resolved = Path(os.path.abspath(out))
    return resolved.parent / f".{resolved.name}{LOCK_SUFFIX}"


def is_lock_file(path: Path) -> bool:
    """True for a lock file this module writes (verify does not report them as unlisted)."""
    return path.name.startswith(".") and path.name.endswith(LOCK_SUFFIX)


def read_holder(out: str | os.PathLike) -> dict[str, Any] | None:
    """The holder record of `out`'s lock, or None (no lock file, or an unreadable record)."""
    try:
        data = json.loads(lock_path(out).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _exited(holder: dict[str, Any] | None) -> bool:
    """A record left by a holder on this host that is no longer running (whatever its fields
    hold: a record edited or damaged at the same size must not crash the next writer)."""
    pid = (holder or {}).get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return False
    return (holder or {}).get("host") == socket.gethostname() and not psutil.pid_exists(pid)


def _refusal(out: Path, holder: dict[str, Any] | None) -> OutputLocked:
    text = holder_text(holder)
    if _exited(holder):
        text += ", which has exited but left a child process holding the lock"
    return OutputLocked(
        f"output {out} is being written by {text}; wait for it to finish, stop it, "
        "or choose another output"
    )


SETTLE_S = 2.0
"""How long a refused writer waits for the holder's record to settle. A writer that just won
the lock writes its record a moment later (and a clean release empties it a moment before the
lock is free), so a writer that lost the race can read an empty or half-written record, or the
record a killed holder left, and name nobody, or the dead."""


def _locked(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _lock_or_refuse(fd: int, mode: int, out: Path) -> None:
    """Take `flock` `mode` on `fd`, or raise the refusal naming its holder: while the record
    is not settled (see SETTLE_S), try the lock again (it may have been released)."""
    deadline = time.monotonic() + SETTLE_S
    while not _locked(fd, mode):
        holder = read_holder(out)
        if (holder is not None and not _exited(holder)) or time.monotonic() > deadline:
            raise _refusal(out, holder)
        time.sleep(0.005)


def _acquire(path: Path, out: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder of the output must be
        blocker = next(p for p in (path.parent, *path.parent.parents) if p.is_file())
        raise ConfigError(
            f"output {out}: {blocker} is a file, not a directory; choose another output"
        ) from None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        _lock_or_refuse(fd, fcntl.LOCK_EX, out)
    except BaseException:
        os.close(fd)
        raise
    stale = read_holder(out)
    if stale and stale.get("pid") != os.getpid():
        warn(
            f"note: taking over the lock on {out} left by {holder_text(stale)}, "
            "which is no longer running"
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder_record(str(out)), indent=2).encode(), 0)
    os.fsync(fd)
    return fd


def is_object_output(out: str | os.PathLike) -> bool:
    """An `s3://` output: locked by a lock object in the store (pretrain.s3_lock)."""
    return str(out).startswith("s3://")


@contextmanager
def _reentrant(
    key: str, acquire: Callable[[], Any], release: Callable[[Any], None]
) -> Iterator[Any]:
    """The handle `acquire()` gave for `key`, held until the outermost block of this process
    that holds `key` ends (then `release(handle)`)."""
    with _guard:
        handle, depth = _held[key] if key in _held else (acquire(), 0)
        _held[key] = (handle, depth + 1)
    try:
        yield handle
    finally:
        with _guard:
            handle, depth = _held[key]
            if depth > 1:
                _held[key] = (handle, depth - 1)
            else:
                del _held[key]
                release(handle)


def _release_file_lock(fd: int) -> None:
    os.ftruncate(fd, 0)  # a clean release leaves no record; a killed holder leaves one (taken over)
    os.close(fd)


@contextmanager
def output_lock(out: str | os.PathLike) -> Iterator[Path | str]:
    """Hold the exclusive writer lock on output directory `out` for the `with` block; for an
    `s3://` output, a lock object in the store (pretrain.s3_lock), which holds across machines.
    Its holder record names `pretrain.command.current_command()`.

    Raises `OutputLocked` (one line naming the holder) when another live process holds it.
    """
    if is_object_output(out):
        uri = str(out)
        with _reentrant(uri.rstrip("/"), lambda: S3Lock(uri).acquire(), S3Lock.release) as lock:
            try:
                yield uri
            except BaseException as exc:
                if lock.lost:  # the heartbeat stopped the run (SIGINT): say why
                    raise OutputLocked(lock.lost) from exc
                raise
        return
    out_path = Path(os.path.abspath(out))
    path = lock_path(out_path)
    with _reentrant(str(path), functools.partial(_acquire, path, out_path), _release_file_lock):
        try:
            yield out_path
        except OSError as exc:
            if exc.filename is None:  # a write to an open file names none: name the output
                exc.filename = str(out_path)
            raise


def check_unlocked(out: str | os.PathLike) -> None:
    """Raise `OutputLocked` (naming the holder) when a live process holds `out`'s lock, without
    taking it: a shared `flock` probe, which launchers of one job can make at once (a
    multi-node launch whose writer rank is only known after rendezvous, trainer/launch.py)."""
    out_path = Path(os.path.abspath(out))
    path = lock_path(out_path)
    if str(path) in _held or not path.exists():
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _lock_or_refuse(fd, fcntl.LOCK_SH, out_path)
    finally:
        os.close(fd)  # closing drops the shared probe
