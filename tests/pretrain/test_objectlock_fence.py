"""Fencing of an `s3://` output's writer lock: a writer whose lock was taken over while it was
frozen (its heartbeat could not run: SIGSTOP, a VM pause) must not write under the output any
more, in the driver (which holds the lock) nor in a worker process (which writes parts under the
driver's lock, knowing it only by the id its `ObjectPath`s carry). On a real S3-compatible server
(moto, one request at a time); the new holder is another process with its own HOME.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import REPO, clean_env
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

pytestmark = pytest.mark.timeout(180)

BUCKET = "fenced"
OUTPUT = f"s3://{BUCKET}/runs/one"
LEASE = 2.0
TAKE_OVER = """
import sys
from pretrain.locking import output_lock
from pretrain.outstore import output_path, write_atomic
with output_lock(sys.argv[1]):
    write_atomic(output_path(sys.argv[1]) / sys.argv[2], b"new holder")
"""
WORKER = """
import pickle, sys
from pretrain.errors import OutputLocked
from pretrain.outstore import output_path, write_atomic
if sys.argv[1].startswith("s3://"):  # a URI string, as the data job hands its tasks the output
    path = output_path(sys.argv[1])
else:
    path = pickle.loads(open(sys.argv[1], "rb").read())
write_atomic(path, b"worker, first")
print("wrote", flush=True)
sys.stdin.readline()
try:
    write_atomic(path, b"worker, second")
except OutputLocked as exc:
    print(exc, flush=True)
    sys.exit(3)
print("wrote again", flush=True)
"""


@pytest.fixture(scope="module")
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


@pytest.fixture
def here(store, monkeypatch) -> str:
    for name, value in s3_env(store).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PRETRAIN_LOCK_LEASE_S", str(LEASE))
    return store


def _read(endpoint: str, key: str) -> bytes:
    with s3_filesystem(endpoint).open_input_stream(f"{BUCKET}/runs/one/{key}") as handle:
        return handle.read()


def _freeze(lock) -> None:
    """What a stopped process looks like to the store: its heartbeat no longer renews."""
    lock._stop.set()
    lock._thread.join(30)


def _wait_expired(lock) -> None:
    from pretrain.lockobject import read_lock

    deadline = time.monotonic() + 60
    while (seen := read_lock(lock.client, lock.target)) is not None and seen.age_s < LEASE:
        assert time.monotonic() < deadline, "the frozen lock never aged past its lease"
        time.sleep(0.2)


def _take_over(tmp_path: Path, endpoint: str, name: str) -> None:
    env = clean_env(tmp_path / "b", **s3_env(endpoint), PRETRAIN_LOCK_LEASE_S=str(LEASE))
    done = subprocess.run(
        [sys.executable, "-c", TAKE_OVER, OUTPUT, name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "taking over the writer lock" in done.stderr


def test_a_frozen_driver_cannot_write_after_its_lock_was_taken_over(tmp_path, here) -> None:
    from pretrain import objectlock
    from pretrain.errors import OutputLocked
    from pretrain.locking import output_lock
    from pretrain.outstore import output_path, remove_tree, write_atomic

    root = output_path(OUTPUT)
    lost = pytest.raises(OutputLocked, match="lost its writer lock")
    with lost as refused, output_lock(OUTPUT):
        lock = objectlock._held[OUTPUT]
        _freeze(lock)
        time.sleep(LEASE / 2)  # stalled past lease / 3, but nobody took the lock
        write_atomic(root / "part.txt", b"old holder")  # renewed first, then written
        assert _read(here, "part.txt") == b"old holder"
        _wait_expired(lock)
        _take_over(tmp_path, here, "part.txt")
        for late in (
            lambda: write_atomic(root / "part.txt", b"stale"),
            lambda: (root / "part.txt").unlink(),
            lambda: remove_tree(root),
        ):
            with pytest.raises(OutputLocked, match="lost its writer lock"):
                late()
    assert "it is now held by nobody" in str(refused.value)  # the new holder released it
    assert "\n" not in str(refused.value)
    assert _read(here, "part.txt") == b"new holder"  # the new holder's object is left alone
    assert OUTPUT not in objectlock._held


def test_a_worker_of_a_frozen_driver_cannot_write_after_the_takeover(tmp_path, here) -> None:
    from pretrain import objectlock
    from pretrain.errors import OutputLocked
    from pretrain.locking import output_lock
    from pretrain.outstore import output_path

    pickled = tmp_path / "path.pkl"
    env = clean_env(tmp_path / "w", **s3_env(here))
    with pytest.raises(OutputLocked), output_lock(OUTPUT):
        lock = objectlock._held[OUTPUT]
        pickled.write_bytes(pickle.dumps(output_path(OUTPUT) / "shards" / "w.txt"))
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(pickled)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout is not None and worker.stdout.readline() == "wrote\n"
        assert _read(here, "shards/w.txt") == b"worker, first"
        _freeze(lock)
        _wait_expired(lock)
        _take_over(tmp_path, here, "shards/w.txt")
        out, err = worker.communicate("go\n", timeout=120)
        lock.fence(force=True)
    assert worker.returncode == 3, err[-2000:]
    assert "stopped writing s3://fenced/runs/one from a worker" in out
    assert f"(id {lock.record['id']}) is expired or removed" in out
    assert _read(here, "shards/w.txt") == b"new holder"


def test_a_worker_writes_while_its_driver_holds_the_lock(tmp_path, here) -> None:
    """Handed the output as a string, as the data job's Ray tasks are: the lock's id reaches it
    in the environment the driver's Ray inherits."""
    import os

    from pretrain.locking import output_lock
    from pretrain.objectlock import FENCE_ENV

    with output_lock(OUTPUT):
        inherited = {FENCE_ENV: os.environ[FENCE_ENV]}
        done = subprocess.run(
            [sys.executable, "-c", WORKER, f"{OUTPUT}/shards/ok.txt"],
            cwd=REPO,
            env=clean_env(tmp_path / "w", **s3_env(here), **inherited),
            input="go\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert FENCE_ENV not in os.environ  # released with the lock
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "wrote\nwrote again\n"
    assert _read(here, "shards/ok.txt") == b"worker, second"
