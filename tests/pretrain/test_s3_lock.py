"""The writer lock of an `s3://` output (pretrain.locking) holds across machines: a lock object
in a real S3-compatible server (moto in server mode). The holder is a process of its own (its
own HOME, as another machine would be); the other writer is this test's process, which shares
nothing with it but the store.

- a second writer is refused in one line naming the holder and how to unlock it, and gets the lock
  once the holder has exited (the lock object is gone);
- a SIGKILLed writer's lock names it until `pretrain unlock OUTPUT --id ID` removes it, which
  refuses a wrong id, a holder still running on this machine and a local output;
- a writer whose lock was removed while it ran says so in one line when it ends, and leaves the
  new holder's lock alone;
- a lock object made by hand (odd fields, no id, not JSON) is refused and unlocked in one line;
- `pretrain verify` checks an artifact in the store (a flipped byte, an unlisted object).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pretrain.errors import OutputLocked
from pretrain.locking import output_lock
from pretrain_app.cli import main
from tests.data_pipeline.raytools import REPO, clean_env
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

pytestmark = [pytest.mark.timeout(180), pytest.mark.serial]

BUCKET = "corpus"
OUTPUT = f"s3://{BUCKET}/runs/one"
KEY = "runs/.one.lock"
HOLDER = """
import sys
from pretrain.provenance import recorded
from pretrain.locking import output_lock
with recorded(["pretrain", "data", "run", "holder.yaml"]), output_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


@pytest.fixture
def client(store: str, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """This process as a writer on its own machine (the store's settings in its environment),
    and a client to the store; the lock object is gone after the test."""
    import boto3

    for name, value in s3_env(store).items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=store, region_name="us-east-1")
    yield client
    client.delete_object(Bucket=BUCKET, Key=KEY)


def _record(client) -> dict | None:
    try:
        return json.loads(client.get_object(Bucket=BUCKET, Key=KEY)["Body"].read())
    except client.exceptions.NoSuchKey:
        return None


def _hold(tmp_path: Path, store: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, OUTPUT],
        cwd=REPO,
        env=clean_env(tmp_path / "a", **s3_env(store)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def _refusal() -> str:
    with pytest.raises(OutputLocked) as refused, output_lock(OUTPUT):
        pass
    line = str(refused.value)
    assert "\n" not in line, line
    return line


def _unlock(ident: str, capsys: pytest.CaptureFixture, output: str = OUTPUT) -> tuple[int, str]:
    """`pretrain unlock OUTPUT --id IDENT`: its exit status and its one line."""
    status = main(["unlock", output, "--id", ident])
    out, err = capsys.readouterr()
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1, lines
    return status, lines[0]


def test_a_writer_on_another_machine_is_refused_naming_the_holder(tmp_path, store, client) -> None:
    holder = _hold(tmp_path, store)
    try:
        record = _record(client)
        assert record is not None and record["output"] == OUTPUT and record["host"]
        assert record["pid"] == holder.pid and record["command"][:3] == ["pretrain", "data", "run"]
        line = _refusal()
        assert f"pid {holder.pid} on {record['host']}" in line and "no longer running" not in line
        assert "pretrain data run holder.yaml" in line
        assert f"`pretrain unlock {OUTPUT} --id {record['id']}`" in line
    finally:
        _, err = holder.communicate("", timeout=60)
    assert holder.returncode == 0, err
    assert _record(client) is None  # released on exit
    with output_lock(OUTPUT):
        assert _record(client)["pid"] == os.getpid()
    assert _record(client) is None


def test_a_killed_writers_lock_names_it_until_unlocked(tmp_path, store, client, capsys) -> None:
    holder = _hold(tmp_path, store)
    record = _record(client)
    assert record is not None
    status, line = _unlock(record["id"], capsys)
    assert status == 2 and "running on this machine" in line and _record(client) == record
    holder.kill()
    holder.communicate(timeout=60)
    assert _record(client) == record  # a killed writer's lock stays
    line = _refusal()
    assert f"pid {holder.pid}" in line and "which is no longer running" in line
    assert f"`pretrain unlock {OUTPUT} --id {record['id']}`" in line
    status, line = _unlock("0" * 16, capsys)
    assert status == 2 and f"has id {record['id']}" in line and _record(client) == record
    status, line = _unlock("x", capsys, output=str(tmp_path / "out"))
    assert status == 2 and "released by the kernel" in line
    status, line = _unlock(record["id"], capsys)
    assert status == 0 and f"held by pid {holder.pid}" in line and _record(client) is None
    status, line = _unlock(record["id"], capsys)
    assert status == 2 and "has no writer lock" in line
    with output_lock(OUTPUT):
        assert _record(client)["pid"] == os.getpid()


@pytest.mark.parametrize("then", ["removed", "taken"])
def test_a_writer_whose_lock_was_removed_says_so_when_it_ends(client, then) -> None:
    """No heartbeat watches the lock: a writer whose lock object was removed while it ran
    (`pretrain unlock` on another machine) learns it when it releases the lock."""
    other = {"id": "f" * 16, "pid": 1, "host": "other-machine", "command": ["pretrain"]}
    with pytest.raises(OutputLocked) as lost, output_lock(OUTPUT):
        client.delete_object(Bucket=BUCKET, Key=KEY)
        if then == "taken":
            client.put_object(Bucket=BUCKET, Key=KEY, Body=json.dumps(other).encode())
    message = str(lost.value)
    assert "\n" not in message and "was removed while this run held it" in message
    assert _record(client) == (other if then == "taken" else None)  # the new holder's is kept
    client.delete_object(Bucket=BUCKET, Key=KEY)
    with output_lock(OUTPUT):  # and the next writer gets the lock
        assert _record(client)["pid"] == os.getpid()


def test_a_lock_object_made_by_hand_is_refused_and_unlocked_in_one_line(client, capsys) -> None:
    """A lock object whose fields are not what a writer writes (edited by hand, or made by another
    tool: a pid in words, a start time out of range, a command that is one string or holds
    numbers, a numeric id, no id, not JSON at all) is refused in one line naming how to unlock
    it, and `pretrain unlock --id` with the id the refusal printed removes it."""
    odd = [
        (
            {"id": 12345, "pid": "one", "host": "h", "started_unix": "yesterday", "command": "x"},
            "12345",
        ),
        ({"id": "b" * 16, "pid": 2**80, "started_unix": 1e30, "command": [1, "two"]}, "b" * 16),
        ({"pid": 7}, None),  # no id: its ETag stands for it
        (None, None),  # not JSON
    ]
    for record, ident in odd:
        body = json.dumps(record).encode() if record else b"\xffnot json"
        etag = client.put_object(Bucket=BUCKET, Key=KEY, Body=body)["ETag"].strip('"')
        ident = ident or etag
        line = _refusal()
        assert f"`pretrain unlock {OUTPUT} --id {ident}`" in line, line
        status, line = _unlock(ident, capsys)
        assert status == 0, line
        assert _record(client) is None


def test_verify_checks_an_artifact_in_the_store(client, capsys) -> None:
    """`pretrain verify s3://...` re-reads every listed object: a byte flipped at the same size
    and an object the manifest does not list are refused in one line."""
    from pretrain.manifest import write_manifest
    from pretrain.storage import output_path, write_atomic

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
