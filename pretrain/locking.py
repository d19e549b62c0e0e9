"""One writer per output (docs/artifacts.md#one-writer-per-output): `with output_lock(out):` holds an
exclusive `flock` on `PARENT/.<name>.lock` (beside the output, which writers replace whole) holding
the holder's record; an `s3://` output, a lock object made by a conditional put (docs/cluster.md)."""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from pretrain.errors import ConfigError, OutputLocked, PretrainError
from pretrain.progress import warn
from pretrain.provenance import current_command

LOCK_SUFFIX = ".lock"


# lock path -> (fd, depth); s3:// output -> (ObjectLock, depth)
_held: dict[str, tuple[Any, int]] = {}
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


def holder_record(output: str) -> dict[str, Any]:
    """Who holds the writer lock of `output`: what a lock file or a lock object holds, for the
    refusal of the next writer."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_unix": round(time.time(), 3),
        "command": current_command(),
        "output": output,
    }


def holder_text(record: dict[str, Any] | None) -> str:
    """'pid P on HOST since TIME (COMMAND)', whatever the record's fields hold (a record edited
    or damaged at the same size must not crash the writer that reads it)."""
    if not record:
        return "an unknown process (no holder record)"
    command = record.get("command")
    words = command if isinstance(command, list) else [command] if command else []
    text = " ".join(str(word) for word in words) or "?"
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(record["started_unix"])))
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        started = "?"
    return f"pid {record.get('pid')!s:.20} on {record.get('host')!s:.100} since {started} ({text})"


def _running_here(holder: dict[str, Any] | None) -> bool | None:
    """Whether the holder of a record from this host still runs; None for a record from another
    host (or whose fields are not what a writer writes: edited or damaged by hand)."""
    pid = (holder or {}).get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return None
    return psutil.pid_exists(pid) if (holder or {}).get("host") == socket.gethostname() else None


def _exited(holder: dict[str, Any] | None) -> bool:
    """A record left by a holder on this host that is no longer running."""
    return _running_here(holder) is False


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
    """An `s3://` output: locked by a lock object in the store, which holds across machines."""
    return str(out).startswith("s3://")


@functools.cache
def _botocore_session() -> Any:
    """One per process: its clients take milliseconds to make, a fresh session's ~0.3 s."""
    import botocore.session

    return botocore.session.get_session()


class ObjectLock:
    """The lock object of an `s3://` output (`s3://bucket/<parent>/.<name>.lock`): where it is, and
    (once held) its id and ETag. Reached through botocore, with the same `AWS_*` settings: pyarrow's
    S3 filesystem cannot send the conditional headers."""

    def __init__(self, output: str) -> None:
        from botocore.config import Config

        parts = urlsplit(output)
        self.bucket, prefix = parts.netloc, parts.path.strip("/")
        self.output = f"s3://{self.bucket}/{prefix}".rstrip("/")
        parent, _, name = prefix.rpartition("/")
        self.key = f"{parent}/.{name or self.bucket}{LOCK_SUFFIX}".lstrip("/")
        self.uri, self.id, self.etag = f"s3://{self.bucket}/{self.key}", uuid.uuid4().hex[:16], ""
        config = Config(retries={"max_attempts": 4, "mode": "standard"}, read_timeout=30)
        self.client = _botocore_session().create_client(
            "s3", region_name=os.environ.get("AWS_REGION") or None, config=config
        )  # AWS_ENDPOINT_URL and the keys: botocore reads them

    def call(self, action: str, method: str, expected: tuple[int, ...], **kwargs: Any) -> Any:
        """`client.METHOD` on the lock object; None when the store answers a status in
        `expected` (404: no such key, 412: its condition failed, 409: a conditional write to
        it is in flight); any other failure is one line."""
        try:
            return getattr(self.client, method)(Bucket=self.bucket, Key=self.key, **kwargs)
        except Exception as exc:
            response = getattr(exc, "response", None) or {}
            if response.get("ResponseMetadata", {}).get("HTTPStatusCode") in expected:
                return None
            raise PretrainError(
                f"cannot {action} the writer lock {self.uri} of {self.output} ("
                f"{' '.join(str(exc).split())}); check the AWS_* settings and the bucket"
            ) from None

    def read(self) -> tuple[dict[str, Any], str] | None:
        """(holder record, ETag) of the lock object, or None: there is none. The record's `id`
        is a string: the ETag where the object has none (made by hand or another tool)."""
        answer = self.call("read", "get_object", (404,))
        if answer is None:
            return None
        try:
            record = json.loads(answer["Body"].read())
        except ValueError:
            record = None
        record = record if isinstance(record, dict) else {}
        return {**record, "id": str(record.get("id") or answer["ETag"].strip('"'))}, answer["ETag"]


def _acquire_object(output: str) -> ObjectLock:
    """Create the lock object of `output` (a conditional write: one writer wins), or raise
    `OutputLocked` naming its holder and how to unlock it."""
    lock = ObjectLock(output)
    body = json.dumps({"id": lock.id, **holder_record(lock.output)}, indent=2).encode()
    seen = None
    while seen is None:
        put = lock.call("create", "put_object", (409, 412), Body=body, IfNoneMatch="*")
        if put:
            lock.etag = put["ETag"]
            return lock
        seen = lock.read()  # None: released, or still being created, since our write
        if seen is None:
            time.sleep(0.2)  # a conditional write in flight (409): ask again, not in a busy loop
    record, lock.etag = seen
    if record["id"] == lock.id:  # the store applied our write, but its reply was lost (a 500)
        return lock
    dead = ", which is no longer running," if _exited(record) else ""
    raise OutputLocked(
        f"output {lock.output} is being written by {holder_text(record)}{dead} (lock "
        f"{lock.uri}); wait for it to finish or stop it; if it is dead, run "
        f"`pretrain unlock {lock.output} --id {record['id']}`"
    )


def _release_object(lock: ObjectLock) -> None:
    """Delete our lock object; raise `OutputLocked` when it was removed while we held it."""
    if not lock.call("remove", "delete_object", (404, 412), IfMatch=lock.etag):
        raise OutputLocked(
            f"the writer lock {lock.uri} of {lock.output} was removed while this run held it "
            "(`pretrain unlock`): another writer may have written the output meanwhile; re-run "
            "once no other writer runs"
        )


def unlock(output: str, ident: str) -> dict[str, Any]:
    """Remove the lock object of `output` when its id is `ident` (what a refusal printed) and its
    holder is not running on this machine; the holder record it held."""
    lock = ObjectLock(output)
    seen = lock.read()
    if seen is None:
        raise PretrainError(f"{output} has no writer lock ({lock.uri} does not exist)")
    record, etag = seen
    if record["id"] != ident:
        raise OutputLocked(
            f"the writer lock of {output} has id {record['id']}, not {ident}: it is held by "
            f"{holder_text(record)}, which took it after the refusal you saw; check it first"
        )
    if _running_here(record):
        raise OutputLocked(
            f"the writer lock of {output} is held by {holder_text(record)}, which is running on "
            "this machine: stop it (it removes its lock when it exits)"
        )
    if not lock.call("remove", "delete_object", (404, 412), IfMatch=etag):
        raise OutputLocked(f"the writer lock of {output} changed while unlocking; leave it")
    return record


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
    `s3://` output, a lock object in the store. Its holder record names
    `pretrain.provenance.current_command()`. A process may re-enter a lock it holds (an ablation
    calls builders that lock their nested outputs).

    Raises `OutputLocked` (one line naming the holder) when another live process holds it.
    """
    if is_object_output(out):
        uri = str(out)
        with _reentrant(uri.rstrip("/"), functools.partial(_acquire_object, uri), _release_object):
            yield uri
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
