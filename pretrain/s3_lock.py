"""The writer lock of an `s3://` output, which holds across machines: one lock object beside the
output, `s3://bucket/<parent>/.<name>.lock`, created with a conditional write (PutObject with
`If-None-Match: *`: the store creates it for exactly one writer and answers 412 to the others).

The object holds the holder record (host, pid, command, start time, a random `id`) and is renewed
every `lease_s / 6` seconds (PutObject with `If-Match` of its last ETag). A lock not renewed for
`lease_s` seconds, on the store's own clock (the answer's `Date` minus the object's
`Last-Modified`), belongs to a writer that died: the next writer takes it over with a write
conditional on the stale ETag (one winner). `pretrain unlock OUTPUT --id ID` removes it at once.
A holder whose lock was taken, or could not be renewed for `lease_s / 2`, stops its run (SIGINT to
itself). `PRETRAIN_LOCK_LEASE_S` sets the lease (default 120 s).

Limits (documented): the store must honour conditional writes (AWS S3 does since 2024-08); a
driver frozen longer than its lease (SIGSTOP, a paused VM) may land writes already in flight
after another took its lock over, until its next renewal stops it. pyarrow's S3 filesystem cannot
send conditional headers, so the lock object is reached through botocore, with the same `AWS_*`
settings (`AWS_ENDPOINT_URL` for an S3-compatible store).
"""

from __future__ import annotations

import email.utils
import json
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from pretrain.command import current_command
from pretrain.errors import ConfigError, OutputLocked, PretrainError
from pretrain.progress import warn

LEASE_ENV = "PRETRAIN_LOCK_LEASE_S"
DEFAULT_LEASE_S = 120.0
LOST = (412, 404, 409)  # precondition failed, no such key, conflicting conditional write


def lease_seconds() -> float:
    text = os.environ.get(LEASE_ENV, "") or str(DEFAULT_LEASE_S)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1.0 <= value <= 86400.0:
        raise ConfigError(f"{LEASE_ENV}={text!r}: the writer lock's lease must be 1-86400 seconds")
    return value


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if response else None
    return int(code) if code else None


class S3Lock:
    """The lock object of one `s3://` output: acquire (or raise `OutputLocked`), renew, release."""

    def __init__(self, output: str) -> None:
        import botocore.session
        from botocore.config import Config

        parts = urlsplit(output)
        if parts.scheme != "s3" or not parts.netloc:
            raise ConfigError(f"{output!r}: an s3 output is s3://bucket/prefix")
        self.bucket, prefix = parts.netloc, parts.path.strip("/")
        self.output = f"s3://{self.bucket}/{prefix}".rstrip("/")
        parent, _, name = prefix.rpartition("/")
        self.key = f"{parent}/.{name or self.bucket}.lock".lstrip("/")
        self.uri = f"s3://{self.bucket}/{self.key}"
        retries = Config(retries={"max_attempts": 4, "mode": "standard"}, read_timeout=30)
        region = os.environ.get("AWS_REGION") or None  # AWS_ENDPOINT_URL: botocore reads it
        self.client = botocore.session.get_session().create_client(
            "s3", region_name=region, config=retries
        )
        self.lease_s = lease_seconds()
        self.record = {"id": uuid.uuid4().hex[:16], **holder_record(self.output)}
        self.record["lease_s"] = self.lease_s
        self.etag = ""
        self.lost: str | None = None
        self._stop = threading.Event()
        self._renewed_at = 0.0

    def _put(self, **condition: str) -> None:
        self.record["heartbeat_unix"] = round(time.time(), 3)
        body = json.dumps(self.record, indent=2).encode()
        self.etag = self.client.put_object(
            Bucket=self.bucket, Key=self.key, Body=body, **condition
        )["ETag"]

    def _error(self, action: str, exc: BaseException) -> PretrainError:
        return PretrainError(
            f"cannot {action} the writer lock {self.uri} of {self.output} "
            f"({' '.join(str(exc).split())}); check the AWS_* settings and that the bucket exists"
        )

    def read(self) -> tuple[dict[str, Any], str, float] | None:
        """(holder record, ETag, age in seconds on the store's clock), or None: no lock."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise self._error("read", exc) from None
        try:
            record = json.loads(answer["Body"].read())
        except ValueError:
            record = None
        date = answer["ResponseMetadata"].get("HTTPHeaders", {}).get("date")
        now = email.utils.parsedate_to_datetime(date).timestamp() if date else time.time()
        age = max(0.0, now - answer["LastModified"].timestamp())
        return (record if isinstance(record, dict) else {}), answer["ETag"], age

    def _mine(self, seen: tuple[dict[str, Any], str, float] | None) -> bool:
        """The object holds our record: a write the store applied whose reply was lost (the
        client's retry was then refused) is ours all the same."""
        if seen is None or seen[0].get("id") != self.record["id"]:
            return False
        self.etag = seen[1]
        return True

    def acquire(self) -> S3Lock:
        """Take the lock (this object, heartbeat running), or raise `OutputLocked`."""
        for _ in range(4):
            self._renewed_at = time.monotonic()
            try:
                self._put(IfNoneMatch="*")
                return self._start()
            except Exception as exc:
                if _status(exc) not in LOST:
                    raise self._error("create", exc) from None
            seen = self.read()
            if seen is None:
                continue  # released between our write and our read
            if self._mine(seen):
                return self._start()
            record, etag, age = seen
            lease = record.get("lease_s")
            lease = (
                float(lease) if isinstance(lease, int | float) and lease > 0 else DEFAULT_LEASE_S
            )
            if age < lease:
                ident = record.get("id") or etag.strip('"')
                raise OutputLocked(
                    f"output {self.output} is being written by {holder_text(record)} (lock "
                    f"{self.uri}, last heartbeat {age:.0f} s ago); wait for it to finish or stop "
                    f"it; if it is dead, its lease expires in {max(0.0, lease - age):.0f} s, or "
                    f"run `pretrain unlock {self.output} --id {ident}`"
                )
            try:
                self._put(IfMatch=etag)
            except Exception as exc:
                if _status(exc) not in LOST:
                    raise self._error("take over", exc) from None
                if not self._mine(self.read()):
                    continue  # another writer took it first
            warn(
                f"note: taking over the writer lock of {self.output} left by "
                f"{holder_text(record)}, whose lease expired ({age:.0f} s without a heartbeat)"
            )
            return self._start()
        raise OutputLocked(
            f"output {self.output}: lost the race for its writer lock {self.uri} four times; "
            "another writer is starting: wait for it, or choose another output"
        )

    def _start(self) -> S3Lock:
        threading.Thread(target=self._beat, name="pretrain-lock", daemon=True).start()
        return self

    def _beat(self) -> None:
        """Renew every `lease_s / 6`; stop the run when the lock was taken or went unrenewed
        for `lease_s / 2` (whatever a renewal raised)."""
        while not self._stop.wait(max(0.2, self.lease_s / 6)):
            sent = time.monotonic()
            try:
                self._put(IfMatch=self.etag)
                self._renewed_at = sent
                continue
            except Exception as exc:
                error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                lost = _status(exc) in LOST
            if lost:
                try:
                    seen = self.read()
                except PretrainError:
                    seen = None
                if self._mine(seen):
                    self._renewed_at = sent
                    continue
                holder = holder_text(seen[0]) if seen else "nobody (the lock object was deleted)"
                why = f"it was taken over or unlocked; it is now held by {holder}"
            elif time.monotonic() - self._renewed_at > self.lease_s / 2:
                why = f"it could not be renewed for {self.lease_s / 2:.0f} s ({error})"
            else:
                continue
            self.lost = (
                f"stopped writing {self.output}: lost its writer lock {self.uri}: {why}; another "
                "writer may now write it: re-run once that one has finished"
            )
            warn(self.lost)
            os.kill(os.getpid(), signal.SIGINT)  # stop before two writers interleave
            return

    def release(self) -> None:
        self._stop.set()
        if self.lost:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except Exception as exc:
            if _status(exc) not in LOST:
                warn(
                    f"note: could not remove the writer lock {self.uri} "
                    f"({' '.join(str(exc).split())}); it expires after {self.lease_s:.0f} s"
                )


def unlock(output: str, ident: str) -> dict[str, Any]:
    """Remove the lock object of `output` when its id is `ident` (what a refusal printed)."""
    lock = S3Lock(output)
    seen = lock.read()
    if seen is None:
        raise PretrainError(f"{output} has no writer lock ({lock.uri} does not exist)")
    record, etag, _ = seen
    current = str(record.get("id") or etag.strip('"'))
    if current != ident:
        raise OutputLocked(
            f"the writer lock of {output} has id {current}, not {ident}: it is held by "
            f"{holder_text(record)}, which took it after the refusal you saw; check it first"
        )
    try:
        lock.client.delete_object(Bucket=lock.bucket, Key=lock.key, IfMatch=etag)
    except Exception as exc:
        if _status(exc) in LOST:
            raise OutputLocked(
                f"the writer lock of {output} changed while unlocking: its holder "
                f"{holder_text(record)} is alive (it renewed its heartbeat); leave it"
            ) from None
        raise lock._error("remove", exc) from None
    return record


def holder_record(output: str) -> dict[str, Any]:
    """Who holds the writer lock of `output`: what a lock file (pretrain.locking) or a lock
    object holds, for the refusal of the next writer."""
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
