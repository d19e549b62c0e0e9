"""The writer lock of an `s3://` output: one lock object in the store, so it holds across machines.

A local output is locked with `flock` (pretrain.locking), which the kernel of one machine keeps.
Two drivers on two machines writing the same `s3://bucket/prefix` share no kernel, so the lock is
an object beside the output (pretrain.lockobject: where it lives, reading it, `pretrain unlock`),
created with a conditional write (PutObject with `If-None-Match: *`: the store creates it for
exactly one writer and answers 412 to every other). This module is the holder's side.

The object holds the holder's host, pid, command, start time and last heartbeat, plus a random
`id`. While held, a thread renews it every `lease_s / 6` seconds (PutObject with `If-Match` of the
last ETag), so a lock whose object was not modified for `lease_s` seconds (measured on the store's
own clock: the `Date` of the answer minus the object's `Last-Modified`) belongs to a writer that
crashed: the next writer takes it over with a conditional write on the stale ETag (one winner).
`pretrain unlock OUTPUT --id ID` removes it at once (the refusal prints that line). A holder that
cannot renew its lock for `lease_s / 2` seconds, or finds it taken, stops its own run (SIGINT to
itself, reported as `OutputLocked`) before another writer could start. Released on exit (a
conditional delete on its own ETag). A conditional write refused because the object already
holds this writer's own record (the store applied it, its reply was lost, the client's retry was
refused) counts as done. `PRETRAIN_LOCK_LEASE_S` sets the lease (default 120 s).

Fencing (a holder frozen past its lease writes no more after a takeover): `fence` renews the lock
before a write when its last renewal is older than `lease_s / 3`; pretrain.objectfence calls it
for every write under the output, and checks the lock from worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from pretrain.command import current_command
from pretrain.errors import ConfigError, OutputLocked, PretrainError
from pretrain.lockobject import (
    DEFAULT_LEASE_S,
    LOST,
    Seen,
    client_for,
    describe,
    holder_lease,
    read_lock,
    refusal,
    status,
    store_error,
    target_of,
)
from pretrain.progress import warn

LEASE_ENV = "PRETRAIN_LOCK_LEASE_S"
KIND = "pretrain-writer-lock"
FENCE_ENV = "PRETRAIN_WRITER_LOCK"  # {"output", "id"} of the held lock, for the job's workers
_held: dict[str, ObjectLock] = {}  # clean output URI -> the lock this process holds on it
_registry = threading.Lock()


class LockUnsupported(PretrainError):
    """The store ignores conditional writes, so no lock object can keep a second writer out."""


def lease_seconds() -> float:
    text = os.environ.get(LEASE_ENV, "")
    if not text:
        return DEFAULT_LEASE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1.0 <= value <= 86400.0:
        raise ConfigError(f"{LEASE_ENV}={text!r}: the writer lock's lease must be 1-86400 seconds")
    return value


class ObjectLock:
    """One held lock object: acquire (or raise `OutputLocked`), heartbeat, release."""

    def __init__(self, output: str, command: Sequence[str] | None = None) -> None:
        self.output = output
        self.target = target_of(output)
        self.client = client_for(self.target)
        self.lease_s = lease_seconds()
        self.record: dict[str, Any] = {
            "kind": KIND,
            "id": uuid.uuid4().hex[:16],
            "output": self.target.output,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": list(command) if command is not None else current_command(),
            "started_unix": round(time.time(), 3),
            "lease_s": self.lease_s,
        }
        self.etag = ""
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()  # one conditional PUT at a time: heartbeat and fence
        self._renewed_at = 0.0  # monotonic time the last successful write of the lock was sent

    def _body(self) -> bytes:
        self.record["heartbeat_unix"] = round(time.time(), 3)
        return json.dumps(self.record, indent=2).encode()

    def _put(self, body: bytes, **condition: str) -> str:
        answer = self.client.put_object(
            Bucket=self.target.bucket,
            Key=self.target.key,
            Body=body,
            ContentType="application/json",
            **condition,
        )
        return str(answer["ETag"])

    def acquire(self) -> None:
        for _ in range(4):
            self._renewed_at = time.monotonic()
            try:
                self.etag = self._put(self._body(), IfNoneMatch="*")
            except Exception as exc:
                if status(exc) not in LOST:
                    raise store_error(self.target, "create", exc) from None
            else:
                self._check_conditional()
                return self._start()
            seen = read_lock(self.client, self.target)
            if seen is None:
                continue  # released between our write and our read: try again
            if self._mine(seen):  # our write was applied, its reply lost, the retry refused
                self._check_conditional()
                return self._start()
            if seen.age_s < holder_lease(seen):
                raise refusal(self.target, seen)
            if self._take_over(seen):
                return self._start()
        raise OutputLocked(
            f"output {self.target.output}: lost the race for its writer lock {self.target.uri} "
            "four times; another writer is starting: wait for it, or choose another output"
        )

    def _take_over(self, seen: Seen) -> bool:
        self._renewed_at = time.monotonic()
        try:
            self.etag = self._put(self._body(), IfMatch=seen.etag)
        except Exception as exc:
            if status(exc) not in LOST:
                raise store_error(self.target, "take over", exc) from None
            if not self._mine(read_lock(self.client, self.target)):
                return False  # another writer took it first
        warn(
            f"note: taking over the writer lock of {self.target.output} left by {describe(seen)}"
            f", whose lease expired ({seen.age_s:.0f} s without a heartbeat)"
        )
        return True

    def _mine(self, seen: Seen | None) -> bool:
        """Whether the lock object holds this writer's record (then its ETag is ours). A write
        the store applied but whose reply was lost (a 500, a cut connection) is retried by the
        client and refused, because the object already changed: by our own write."""
        if seen is None or (seen.record or {}).get("id") != self.record["id"]:
            return False
        self.etag = seen.etag
        return True

    def _check_conditional(self) -> None:
        """A store that ignores `If-None-Match` would let every writer in: write again under
        the same condition; it must be refused."""
        try:
            self.etag = self._put(self._body(), IfNoneMatch="*")
        except Exception as exc:
            if status(exc) in LOST:
                return
            self.release()
            raise store_error(self.target, "check", exc) from None
        self.release()
        raise LockUnsupported(
            f"the store of {self.target.output} ignores conditional writes (If-None-Match), so a "
            "writer lock there cannot keep a second writer out; use a store that supports them "
            "(AWS S3 does since 2024-08), or make sure no other machine writes this output"
        )

    def _start(self) -> None:
        with _registry:
            _held[self.target.output] = self
            os.environ[FENCE_ENV] = self._token()  # inherited by the Ray it starts (workers)
        self._thread = threading.Thread(target=self._beat, name="pretrain-lock", daemon=True)
        self._thread.start()

    def _token(self) -> str:
        return json.dumps({"output": self.output, "id": self.record["id"]})

    def _renew(self) -> str | None:
        """One conditional renewal (the caller holds `_io`): None when renewed; the store's error
        otherwise (`lost` is set when the lock was taken over or removed)."""
        sent = time.monotonic()
        try:
            self.etag = self._put(self._body(), IfMatch=self.etag)
        except Exception as exc:
            if status(exc) not in LOST:
                return " ".join(str(exc).split())
            try:
                seen = read_lock(self.client, self.target)
            except PretrainError:
                seen = None
            if self._mine(seen):
                self._renewed_at = sent
                return None
            holder = describe(seen) if seen else "nobody (the lock object was deleted)"
            self._mark_lost(f"it was taken over or unlocked; it is now held by {holder}")
            return self.lost
        self._renewed_at = sent
        return None

    def _overdue(self, error: str | None) -> None:
        if error and not self.lost and time.monotonic() - self._renewed_at > self.lease_s / 2:
            self._mark_lost(f"it could not be renewed for {self.lease_s / 2:.0f} s ({error})")

    def _beat(self) -> None:
        """Renew every `lease_s / 6` s. Whatever one renewal raises (a bug, a reply cut short)
        counts as a renewal that failed: the next one tries again, and a lock not renewed for
        `lease_s / 2` stops the run, as a store that stopped answering does. Should even that
        fail, the run is stopped: a thread that died would leave it writing unrenewed."""
        try:
            while not self._stop.wait(max(0.2, self.lease_s / 6)):
                with self._io:
                    if self.lost:
                        return
                    try:
                        error = self._renew()
                    except Exception as exc:
                        error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                    self._overdue(error)
                    if self.lost:
                        break
            else:
                return
        except BaseException as exc:
            if not self.lost:
                self.lost = (
                    f"stopped writing {self.target.output}: the heartbeat of its writer lock "
                    f"{self.target.uri} failed ({type(exc).__name__}: {exc}); re-run it"
                )
        os.kill(os.getpid(), signal.SIGINT)  # stop before two writers interleave

    def fence(self, force: bool = False) -> None:
        """Raise `OutputLocked` unless this process still holds the lock (see the module
        docstring): called before every write under the output; `force`: renew it now."""
        with self._io:
            due = force or time.monotonic() - self._renewed_at >= self.lease_s / 3
            if not self.lost and due:
                self._overdue(self._renew())
            if self.lost:
                raise OutputLocked(self.lost)

    def _mark_lost(self, why: str) -> None:
        self.lost = (
            f"stopped writing {self.target.output}: lost its writer lock {self.target.uri}: "
            f"{why}; another writer may now write it: re-run once that one has finished"
        )
        self._stop.set()
        warn(self.lost)

    def release(self) -> None:
        with _registry:
            if _held.get(self.target.output) is self:
                del _held[self.target.output]
            if os.environ.get(FENCE_ENV) == self._token():
                del os.environ[FENCE_ENV]
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)
        if self.lost:
            return
        try:
            self.client.delete_object(
                Bucket=self.target.bucket, Key=self.target.key, IfMatch=self.etag
            )
        except Exception as exc:
            if status(exc) not in LOST:
                warn(
                    f"note: could not remove the writer lock {self.target.uri} "
                    f"({' '.join(str(exc).split())}); it expires after {self.lease_s:.0f} s"
                )
