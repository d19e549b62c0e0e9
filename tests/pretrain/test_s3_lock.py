"""The writer lock of an `s3://` output (pretrain.s3_lock) holds across machines: a lock object
in a real S3-compatible server (moto in server mode), taken by writers that share no local lock
(each has its own HOME and project cache, as two machines would).

- a second writer is refused in one line naming the holder and how to unlock, and gets the lock
  once the holder has exited (the lock object is gone);
- a SIGKILLed writer's lock is taken over once its lease has expired (never before), and
  `pretrain unlock OUTPUT --id ID` removes it at once, refusing a wrong id;
- a writer whose lock is taken from it stops its own run, naming the new holder;
- `pretrain verify` checks an artifact in the store (a flipped byte, an unlisted object).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import REPO, clean_env
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

pytestmark = [pytest.mark.timeout(180), pytest.mark.serial]

BUCKET = "corpus"
OUTPUT = f"s3://{BUCKET}/runs/one"
HOLDER = """
import sys, time
from pretrain.command import recorded
from pretrain.locking import output_lock
with recorded(["pretrain", "data", "run", "holder.yaml"]), output_lock(sys.argv[1]):
    print("locked", flush=True)
    if sys.argv[2] == "stdin":
        sys.stdin.read()
    else:
        while True:
            time.sleep(0.05)
"""
TRY = """
import sys
from pretrain.errors import OutputLocked
from pretrain.locking import output_lock
try:
    with output_lock(sys.argv[1]):
        print("acquired", flush=True)
except OutputLocked as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


def _client(endpoint: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _machine(tmp_path: Path, name: str, endpoint: str, lease: float) -> dict[str, str]:
    """A shell on another "machine": its own HOME, so its own project cache and local locks."""
    return clean_env(tmp_path / name, **s3_env(endpoint), PRETRAIN_LOCK_LEASE_S=str(lease))


def _start(script: str, env: dict[str, str], mode: str) -> subprocess.Popen:
    """`script OUTPUT MODE` in a process of its own, its three streams piped."""
    return subprocess.Popen(
        [sys.executable, "-c", script, OUTPUT, mode],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _hold(env: dict[str, str], mode: str = "stdin") -> subprocess.Popen:
    holder = _start(HOLDER, env, mode)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def _try(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", TRY, OUTPUT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _record(endpoint: str) -> dict | None:
    client = _client(endpoint)
    try:
        return json.loads(client.get_object(Bucket=BUCKET, Key="runs/.one.lock")["Body"].read())
    except client.exceptions.NoSuchKey:
        return None


def _unlock(env: dict[str, str], ident: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pretrain_app", "unlock", OUTPUT, "--id", ident],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_writer_on_another_machine_is_refused_naming_the_holder(tmp_path, store) -> None:
    holder = _hold(_machine(tmp_path, "a", store, 60))
    try:
        record = _record(store)
        assert record is not None
        assert record["pid"] == holder.pid and record["command"][:3] == ["pretrain", "data", "run"]
        assert record["host"] and record["heartbeat_unix"] >= record["started_unix"]
        refused = _try(_machine(tmp_path, "b", store, 60))
        assert refused.returncode == 3, refused.stderr[-2000:]
        line = refused.stdout.strip()
        assert "\n" not in line and f"pid {holder.pid} on {record['host']}" in line
        assert "pretrain data run holder.yaml" in line
        assert f"`pretrain unlock {OUTPUT} --id {record['id']}`" in line
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0, holder.stderr
    assert _record(store) is None  # released on exit
    after = _try(_machine(tmp_path, "b", store, 60))
    assert after.returncode == 0 and after.stdout == "acquired\n", after.stderr[-2000:]
    assert _record(store) is None


def test_a_killed_writers_lock_is_taken_over_only_after_its_lease(tmp_path, store) -> None:
    lease = 3.0
    holder = _hold(_machine(tmp_path, "a", store, lease))
    dead = _record(store)
    assert dead is not None
    holder.send_signal(signal.SIGKILL)
    holder.wait(60)
    other = _machine(tmp_path, "b", store, lease)
    deadline = time.monotonic() + 120
    refusals = 0
    while True:
        attempt = _try(other)
        if attempt.returncode == 0:
            break
        assert attempt.returncode == 3, attempt.stderr[-2000:]
        assert f"pid {dead['pid']}" in attempt.stdout and "lease expires in" in attempt.stdout
        refusals += 1
        assert time.monotonic() < deadline, "the dead writer's lock was never taken over"
        time.sleep(0.5)
    assert attempt.stdout == "acquired\n"
    note = [line for line in attempt.stderr.splitlines() if "taking over" in line]
    assert len(note) == 1 and f"pid {dead['pid']}" in note[0], attempt.stderr[-2000:]
    silent = float(note[0].rsplit("(", 1)[1].split(" s ")[0])
    assert silent >= lease  # the store's clock: never taken before the lease ran out
    assert _record(store) is None


@pytest.mark.slow  # five processes: ~20 s under load
def test_unlock_removes_a_dead_writers_lock_given_its_id(tmp_path, store) -> None:
    holder = _hold(_machine(tmp_path, "a", store, 600))
    dead = _record(store)
    assert dead is not None
    holder.send_signal(signal.SIGKILL)
    holder.wait(60)
    other = _machine(tmp_path, "b", store, 600)
    refused = _try(other)
    assert refused.returncode == 3 and f"--id {dead['id']}`" in refused.stdout
    wrong = _unlock(other, "0" * 16)
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1
    assert f"has id {dead['id']}" in wrong.stderr and _record(store) == dead
    local = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "unlock", str(tmp_path / "out"), "--id", "x"],
        cwd=REPO,
        env=other,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert local.returncode == 2 and "released by the kernel" in local.stderr
    done = _unlock(other, dead["id"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"held by pid {dead['pid']}" in done.stdout and _record(store) is None
    after = _try(other)
    assert after.returncode == 0 and "taking over" not in after.stderr, after.stderr[-2000:]


def test_a_writer_whose_lock_is_taken_stops_naming_the_new_holder(tmp_path, store) -> None:
    holder = _hold(_machine(tmp_path, "a", store, 3.0), mode="loop")
    record = _record(store)
    assert record is not None
    intruder = {**record, "id": "f" * 16, "pid": 1, "host": "other-machine"}
    _client(store).put_object(Bucket=BUCKET, Key="runs/.one.lock", Body=json.dumps(intruder))
    _, err = holder.communicate(timeout=120)
    assert holder.returncode != 0
    assert "lost its writer lock" in err and "pid 1 on other-machine" in err, err[-2000:]
    assert _record(store)["id"] == "f" * 16  # the new holder's lock is left alone
    _client(store).delete_object(Bucket=BUCKET, Key="runs/.one.lock")


def test_a_bad_lease_setting_is_one_line(monkeypatch) -> None:
    from pretrain.errors import ConfigError
    from pretrain.s3_lock import lease_seconds

    monkeypatch.setenv("PRETRAIN_LOCK_LEASE_S", "soon")
    with pytest.raises(ConfigError, match="PRETRAIN_LOCK_LEASE_S='soon'"):
        lease_seconds()


def test_verify_checks_an_artifact_in_the_store(store, monkeypatch, capsys) -> None:
    """`pretrain verify s3://...` re-reads every listed object: a byte flipped at the same size
    and an object the manifest does not list are refused in one line."""
    from pretrain.manifest import write_manifest
    from pretrain.storage import output_path, write_atomic
    from pretrain_app.cli import main

    for name, value in s3_env(store).items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{BUCKET}/artifacts/verified"
    root = output_path(uri)
    write_atomic(root / "data" / "a.bin", b"0123456789")
    write_atomic(root / "ledger.json", b"{}")
    write_manifest(root, "shards", counts={"documents_kept": 1})
    assert main(["verify", uri]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {uri} (shards, 2 files verified")
    write_atomic(root / "data" / "a.bin", b"0123456788")  # same size, one byte changed
    assert main(["verify", uri]) == 2
    err = capsys.readouterr().err
    assert "data/a.bin does not match its sha256" in err and len(err.splitlines()) == 1
    write_atomic(root / "data" / "a.bin", b"0123456789")
    write_atomic(root / "data" / "planted.bin", b"x")
    assert main(["verify", uri]) == 2
    assert "data/planted.bin" in capsys.readouterr().err


def test_a_lock_object_edited_by_hand_is_still_refused_and_unlocked_in_one_line(
    tmp_path, store
) -> None:
    """A lock object whose holder fields are not what a writer writes (edited by hand, or made
    by another tool: a pid in words, a start time out of range, a command that is one string or
    holds numbers, a numeric id) is refused in one line naming how to unlock it, and
    `pretrain unlock --id` with the id the refusal printed removes it."""
    other = _machine(tmp_path, "b", store, 600)
    odd = [
        {"id": 12345, "pid": "one", "host": "h", "started_unix": "yesterday", "command": "run x"},
        {"id": "b" * 16, "pid": 2**80, "started_unix": 1e30, "command": [1, "two"]},
    ]
    for record in odd:
        _client(store).put_object(Bucket=BUCKET, Key="runs/.one.lock", Body=json.dumps(record))
        refused = _try(other)
        assert refused.returncode == 3, refused.stderr[-2000:]
        line = refused.stdout.strip()
        assert "\n" not in line and f"--id {record['id']}`" in line, line
        done = _unlock(other, str(record["id"]))
        assert done.returncode == 0, done.stderr[-2000:]
        assert _record(store) is None


HEARTBEAT_FAULT = """
import argparse, sys, time
from pretrain import s3_lock
from pretrain.locking import output_lock
from pretrain.program import run

real, calls = s3_lock.S3Lock._put, []
def put(self, **condition):  # an unexpected exception in a renewal: always, or the first one
    if "IfMatch" in condition and self.etag:
        calls.append(1)
        if sys.argv[2] == "always" or len(calls) == 1:
            print("raised", flush=True)
            raise RuntimeError("a bug in the heartbeat")
    return real(self, **condition)
s3_lock.S3Lock._put = put

def hold(args):
    with output_lock(args.output):
        print("locked", flush=True)
        while sys.argv[2] == "always":  # held until something stops this process
            time.sleep(0.05)
        sys.stdin.readline()
    return 0

parser = argparse.ArgumentParser(prog="pretrain")
parser.add_argument("output")
parser.add_argument("mode")
parser.set_defaults(handler=hold, command="hold")
sys.exit(run(parser, sys.argv[1:]))
"""


@pytest.fixture
def faulty(store) -> Iterator[list[subprocess.Popen]]:
    """Holders with a faulty heartbeat; any still running at the end is killed."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _hold_faulty(env: dict[str, str], mode: str, started: list) -> subprocess.Popen:
    holder = _start(HEARTBEAT_FAULT, env, mode)
    started.append(holder)
    return holder


def test_a_heartbeat_that_keeps_failing_stops_the_run_in_one_line(tmp_path, store, faulty) -> None:
    """Whatever a renewal raises counts as a failed renewal: one that keeps failing stops the run
    (exit 2, one line) once the lock went lease / 2 unrenewed; the thread used to die silently
    and leave the run writing under a lock nobody renewed."""
    holder = _hold_faulty(_machine(tmp_path, "a", store, 3.0), "always", faulty)
    out, err = holder.communicate(timeout=120)  # only the lock's heartbeat can stop it
    assert "locked" in out and "raised" in out, (out, err[-2000:])
    errors = [line for line in err.splitlines() if "error:" in line]
    assert holder.returncode == 2 and len(errors) == 1, err[-2000:]
    assert "lost its writer lock" in errors[0] and "could not be renewed" in errors[0]
    assert "RuntimeError: a bug in the heartbeat" in errors[0]
    _client(store).delete_object(Bucket=BUCKET, Key="runs/.one.lock")


def test_a_heartbeat_that_fails_once_keeps_renewing(tmp_path, store, faulty) -> None:
    holder = _hold_faulty(_machine(tmp_path, "a", store, 3.0), "once", faulty)
    assert holder.stdout is not None
    assert [holder.stdout.readline() for _ in range(2)] == ["locked\n", "raised\n"]
    first = _record(store)
    assert first is not None
    deadline = time.monotonic() + 60
    beats = {first["heartbeat_unix"]}
    while len(beats) < 3:  # renewed twice after the failed beat
        assert holder.poll() is None and time.monotonic() < deadline, holder.communicate()[1]
        record = _record(store)
        assert record is not None and record["id"] == first["id"]
        beats.add(record["heartbeat_unix"])
        time.sleep(0.1)
    _, err = holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0, err[-2000:]
    assert _record(store) is None  # released as usual
