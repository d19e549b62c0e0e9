"""The writer lock object of an `s3://` output as it sits in the store: where it lives, how to
reach its store, reading and describing it, and removing it by id (`pretrain unlock`).

What holding one means (acquire, heartbeat, fence, release) is pretrain.objectlock; this module is
what a reader of the lock needs: the holder deciding whether a lock is stale, a worker checking
its driver's lock (pretrain.objectfence), `pretrain unlock`, and a refusal that names the holder.

The lock object is `s3://bucket/<parent>/.<name>.lock` beside the output. pyarrow's S3FileSystem
cannot send conditional headers, so the store is reached through botocore, with the same
credentials and endpoint (the `AWS_*` variables, or the URI's `endpoint_override` / `region` /
`scheme` query as pyarrow reads it). A lock's age is measured on the store's own clock: the
`Date` of the answer minus the object's `Last-Modified`.
"""

from __future__ import annotations

import email.utils
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pretrain.errors import ConfigError, OutputLocked, PretrainError

DEFAULT_LEASE_S = 120.0
LOST = (412, 404, 409)  # precondition failed, no such key, conflicting conditional write


@dataclass(frozen=True)
class Target:
    """Where the lock object of one output lives, and how to reach its store."""

    output: str
    bucket: str
    key: str
    endpoint: str | None
    region: str | None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def target_of(output: str) -> Target:
    """`s3://bucket/runs/one` -> the lock object `s3://bucket/runs/.one.lock`."""
    parts = urlsplit(output)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"{output!r}: an object-store lock needs an s3://bucket/prefix URI")
    bucket = parts.netloc.rsplit("@", 1)[-1]
    prefix = parts.path.strip("/")
    parent, _, name = prefix.rpartition("/")
    lock_name = f".{name or bucket}.lock"
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    endpoint = query.get("endpoint_override")
    if endpoint and "://" not in endpoint:
        endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
    region = (
        query.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    clean = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    key = f"{parent}/{lock_name}" if parent else lock_name
    return Target(clean, bucket, key, endpoint, region)


def client_for(target: Target) -> Any:
    import botocore.session
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": 4, "mode": "standard"}, connect_timeout=10, read_timeout=30
    )
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=target.endpoint, region_name=target.region, config=config
    )


def status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status else None


def store_error(target: Target, action: str, exc: BaseException) -> PretrainError:
    reason = " ".join(str(exc).split())
    return PretrainError(
        f"cannot {action} the writer lock {target.uri} of {target.output} ({reason}); check the "
        "credentials and endpoint (AWS_* variables) and that the bucket exists"
    )


@dataclass(frozen=True)
class Seen:
    """The lock object as read: its record (None when unreadable), ETag and age on the store's
    clock."""

    record: dict[str, Any] | None
    etag: str
    age_s: float


def read_lock(client: Any, target: Target) -> Seen | None:
    """The current lock object, or None when there is none."""
    try:
        answer = client.get_object(Bucket=target.bucket, Key=target.key)
    except Exception as exc:
        if status(exc) == 404:
            return None
        raise store_error(target, "read", exc) from None
    body = answer["Body"].read()
    try:
        record = json.loads(body)
    except ValueError:
        record = None
    date = answer["ResponseMetadata"].get("HTTPHeaders", {}).get("date")
    now = email.utils.parsedate_to_datetime(date).timestamp() if date else time.time()
    age = max(0.0, now - answer["LastModified"].timestamp())
    return Seen(record if isinstance(record, dict) else None, answer["ETag"], age)


def holder_lease(seen: Seen) -> float:
    lease = (seen.record or {}).get("lease_s")
    if isinstance(lease, int | float) and not isinstance(lease, bool) and lease > 0:
        return float(lease)
    return DEFAULT_LEASE_S


def started_text(value: Any) -> str:
    """A holder's start time as UTC text; '?' when the field is not a time (edited by hand)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(value)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def holder_pid(record: dict[str, Any]) -> int | None:
    """The holder's pid, when the record holds one a process could have."""
    pid = record.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31 else None


def describe(seen: Seen) -> str:
    record = seen.record or {}
    if not record:
        return "an unknown writer (the lock object holds no holder record)"
    return holder_text(record)


def holder_text(record: dict[str, Any]) -> str:
    """'pid P on HOST since TIME (COMMAND)' of a holder record, whatever its fields hold (a
    record edited or damaged at the same size must not crash the writer that reads it)."""
    command = record.get("command")
    words = command if isinstance(command, list) else [command] if command else []
    text = " ".join(str(word) for word in words) or "?"
    started = started_text(record.get("started_unix", 0))
    return f"pid {record.get('pid')!s:.20} on {record.get('host')!s:.100} since {started} ({text})"


def lock_id(seen: Seen) -> str:
    """The id `pretrain unlock --id` takes: the holder record's, else the object's ETag."""
    ident = (seen.record or {}).get("id")
    return str(ident) if ident not in (None, "") else seen.etag.strip('"')


def refusal(target: Target, seen: Seen) -> OutputLocked:
    record = seen.record or {}
    lease = holder_lease(seen)
    here = record.get("host") == socket.gethostname()
    pid = holder_pid(record)
    gone = here and pid is not None and not pid_alive(pid)
    state = ", no longer running on this host" if gone else ""
    ident = lock_id(seen)
    return OutputLocked(
        f"output {target.output} is being written by {describe(seen)}{state} (lock "
        f"{target.uri}, last heartbeat {seen.age_s:.0f} s ago); wait for it to finish or stop "
        f"it; if it is dead, its lease expires in {max(0.0, lease - seen.age_s):.0f} s, or run "
        f"`pretrain unlock {target.output} --id {ident}`"
    )


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unlock(output: str, ident: str) -> Seen:
    """Remove the lock object of `output` when its id is `ident` (what a refusal printed)."""
    target = target_of(output)
    client = client_for(target)
    seen = read_lock(client, target)
    if seen is None:
        raise PretrainError(f"{output} has no writer lock ({target.uri} does not exist)")
    current = lock_id(seen)
    if current != ident:
        raise OutputLocked(
            f"the writer lock of {output} has id {current}, not {ident}: it is held by "
            f"{describe(seen)}, which took it after the refusal you saw; check that writer first"
        )
    try:
        client.delete_object(Bucket=target.bucket, Key=target.key, IfMatch=seen.etag)
    except Exception as exc:
        if status(exc) in LOST:
            raise OutputLocked(
                f"the writer lock of {output} changed while unlocking: its holder "
                f"{describe(seen)} is alive (it renewed its heartbeat); leave it"
            ) from None
        raise store_error(target, "remove", exc) from None
    return seen
