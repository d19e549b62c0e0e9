"""`output: s3://bucket/prefix`: shards, rejects, ledger and manifest written through pyarrow's
S3FileSystem to a real S3-compatible server (moto in server mode), by `pretrain data run` from a
clean shell:

- the objects are byte-identical to the files of the same job run into a local directory, and
  the manifest lists every object with its sha256;
- a re-run after an interrupted run reuses the parts that still verify and recomputes the rest:
  a lost part record, and a shard with one byte flipped at the same size;
- a writer SIGKILLed in the middle of a multipart upload leaves no object under the final key.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import DATA, EMBEDDED_CONFIG, REPO, clean_env, data_run
from tests.data_pipeline.s3tools import s3_env, s3_filesystem

BUCKET = "corpus"


def _objects(s3, prefix: str) -> dict[str, bytes]:
    from pyarrow import fs

    found = {}
    for info in s3.get_file_info(fs.FileSelector(prefix, recursive=True)):
        if info.type == fs.FileType.File:
            with s3.open_input_stream(info.path) as handle:
                found[info.path.removeprefix(prefix + "/")] = handle.read()
    return found


def _published(files: dict[str, bytes]) -> dict[str, bytes]:
    """Shards (data/), rejects and ledger: what must not depend on where the output lives."""
    keep = ("data/", "_rejects/", "ledger.json")
    return {k: v for k, v in files.items() if k.startswith(keep)}


def _local(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.name.startswith(".") and ".logs" not in p.parts
    }


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=500)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_s3_output_matches_a_local_output_and_resumes_from_verified_parts(
    tmp_path, s3_server, embedded_out
) -> None:
    s3 = s3_filesystem(s3_server)
    s3.create_dir(BUCKET)
    env = clean_env(tmp_path / "home", **s3_env(s3_server))
    config = {**EMBEDDED_CONFIG, "inputs": [str(DATA)]}  # embedded_out: into a local folder
    uri = f"s3://{BUCKET}/runs/one"
    argv = data_run({**config, "output": uri}, tmp_path / "s.yaml")
    first = _run(argv, env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "23 docs in, 17 kept, 6 dropped" in first.stdout
    stored = _objects(s3, f"{BUCKET}/runs/one")
    expected = _published(_local(embedded_out))
    assert any(k.startswith("data/") for k in expected)
    assert _published(stored) == expected
    manifest = json.loads(stored["manifest.json"])
    assert manifest["kind"] == "shards"
    for name, data in stored.items():
        if name != "manifest.json":
            assert manifest["files"][name]["sha256"] == hashlib.sha256(data).hexdigest(), name
    assert set(manifest["files"]) == set(stored) - {"manifest.json"}
    assert not (REPO / "s3:").exists() and not (tmp_path / "s3:").exists()

    # An interrupted run: no manifest, one part's record lost, one shard flipped.
    shards = sorted(k for k in stored if k.startswith("data/"))
    lost, flipped = shards[0], shards[-1]
    s3.delete_file(f"{BUCKET}/runs/one/manifest.json")
    s3.delete_file(f"{BUCKET}/runs/one/.parts/{Path(lost).stem}.json")
    data = bytearray(stored[flipped])
    data[len(data) // 2] ^= 0x01
    with s3.open_output_stream(f"{BUCKET}/runs/one/{flipped}") as handle:
        handle.write(bytes(data))
    second = _run(argv, env)
    assert second.returncode == 0, second.stderr[-2000:]
    parts = json.loads(stored["ledger.json"])["parts"]
    assert f"({parts - 2} of {parts} parts reused)" in second.stdout, second.stdout
    again = _objects(s3, f"{BUCKET}/runs/one")
    assert _published(again) == expected
    assert "manifest.json" in again


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_writer_killed_mid_upload_leaves_no_object(tmp_path, s3_server) -> None:
    import boto3

    s3 = s3_filesystem(s3_server)
    s3.create_dir(BUCKET)
    env = clean_env(tmp_path / "home", **s3_env(s3_server))
    key = "runs/big/data/x-00000.parquet"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys; from pretrain.storage import output_path, write_atomic; "
            "write_atomic(output_path(sys.argv[1]), os.urandom(200 << 20))",
            f"s3://{BUCKET}/{key}",
        ],
        cwd=REPO,
        env=env,
    )
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    started = False
    deadline = time.monotonic() + 200
    while writer.poll() is None and time.monotonic() < deadline:
        uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        if any(u["Key"] == key for u in uploads):
            started = True
            writer.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    writer.wait(60)
    assert started, "the writer finished before its upload could be seen in flight"
    listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert [o["Key"] for o in listed] == []
