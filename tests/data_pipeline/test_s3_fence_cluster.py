"""Workers on an EXISTING cluster (`--ray-address`, `ray job submit`) are fenced like a local
Ray's: the driver hands them its writer lock's id through the job's runtime_env
(`rayinit.with_driver_env`). The cluster's nodes were started by `ray start --head` from a shell
that never held the lock, so without that hand-over a worker has no way to know it writes under
a lock, and would write after the lock was taken over.

A real `ray start --head` cluster on loopback and a real S3-compatible server (moto, one request
at a time). The driver holds the lock of `s3://fenced/runs/one`, connects by address and runs
tasks that write under the output by URI (as the data job hands its tasks the output); each task
runs in a fresh worker process, so no worker has a lock check cached from an earlier task.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import (
    LOOPBACK_ONLY,
    REPO,
    clean_env,
    free_port,
    start_node,
    stop_node,
    token_home,
    wait_for_head,
    wait_for_nodes,
)
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BUCKET = "fenced"
OUTPUT = f"s3://{BUCKET}/runs/one"
LOCK_KEY = "runs/.one.lock"
DRIVER = """
import sys
import ray
from pretrain import rayinit
from pretrain.locking import output_lock

@ray.remote(max_calls=1)  # a fresh worker process per call
def write(uri, name):
    import os
    from pretrain.errors import OutputLocked
    from pretrain.outstore import output_path, write_atomic
    try:
        write_atomic(output_path(uri) / name, b"from a worker")
    except OutputLocked as exc:
        return f"refused: {exc}"
    return "wrote " + ("with" if os.environ.get("PRETRAIN_WRITER_LOCK") else "without") + " a lock"

uri, address = sys.argv[1], sys.argv[2]
with output_lock(uri):
    rayinit.connect(address)
    print(ray.get(write.remote(uri, "first")), flush=True)
    sys.stdin.readline()  # the test takes the lock over here
    print(ray.get(write.remote(uri, "second")), flush=True)
ray.shutdown()
"""


@pytest.fixture
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


def _exists(endpoint: str, name: str) -> bool:
    from pyarrow import fs

    info = s3_filesystem(endpoint).get_file_info(f"{BUCKET}/runs/one/{name}")
    return info.type == fs.FileType.File


def test_a_cluster_worker_refuses_to_write_after_its_drivers_lock_was_taken(
    tmp_path: Path, store: str
) -> None:
    port = free_port()
    home = token_home(tmp_path / "home")  # Ray's token auth, as `ray start` turns it on
    node_env = clean_env(home, **s3_env(store))  # the nodes' own credentials
    temp = Path("/tmp") / f"ray-fc-{port}"  # short: Ray's socket paths live under it
    head = start_node(temp, node_env, 1, port=port, loopback_only=True)
    address = f"127.0.0.1:{port}"
    driver = None
    try:
        wait_for_head(address, head)
        wait_for_nodes(address, node_env, 1, head, loopback_only=True)
        # a long lease: the driver's own heartbeat (every lease / 6) must not be what notices
        env = clean_env(home, **s3_env(store), **LOOPBACK_ONLY, PRETRAIN_LOCK_LEASE_S="600")
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, OUTPUT, address],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert driver.stdout is not None and driver.stdin is not None
        first = driver.stdout.readline()
        assert first.startswith("wrote"), (first, driver.poll() is None or driver.stderr)
        assert _exists(store, "first")
        client = _client(store)
        record = json.loads(client.get_object(Bucket=BUCKET, Key=LOCK_KEY)["Body"].read())
        taken = {**record, "id": "f" * 16, "pid": 1, "host": "other-machine"}
        client.put_object(Bucket=BUCKET, Key=LOCK_KEY, Body=json.dumps(taken))
        out, err = driver.communicate("go\n", timeout=300)
        assert driver.returncode == 0, err[-3000:]
        assert out.startswith("refused: stopped writing s3://fenced/runs/one from a worker"), out
        assert "now held by pid 1 on other-machine" in out, out
        assert not _exists(store, "second")  # the worker wrote nothing after the takeover
        assert json.loads(client.get_object(Bucket=BUCKET, Key=LOCK_KEY)["Body"].read()) == taken
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.communicate()
        stop_node(head)
        shutil.rmtree(temp, ignore_errors=True)
        temp.with_name(temp.name + ".log").unlink(missing_ok=True)
