"""`s3://` inputs through pyarrow's S3FileSystem, served by a real S3-compatible server (moto in
server mode, a separate process on loopback), read by `pretrain data run` from a clean shell."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run, free_port

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def s3_server():
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(120):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def _texts(out: Path) -> list[str]:
    return [
        t for p in sorted(out.glob("data/*.parquet")) for t in pq.read_table(p)["text"].to_pylist()
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_s3_inputs_give_the_same_documents_as_local_files(tmp_path, s3_server) -> None:
    from pyarrow import fs

    s3 = fs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        endpoint_override=s3_server,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    s3.create_dir("crawl")
    for path in sorted(DATA.iterdir()):
        if path.suffix in (".gz", ".jsonl", ".parquet"):
            with s3.open_output_stream(f"crawl/in/{path.name}") as f:
                f.write(path.read_bytes())
    env = clean_env(tmp_path / "home", **KEYS, AWS_ENDPOINT_URL=s3_server, AWS_REGION="us-east-1")
    config = {"shard_rows": 4, "batch_rows": 3, "ray": {"num_cpus": 2, "timeout_s": 300}}
    runs = {}
    for name, inputs in (("s3", ["s3://crawl/in"]), ("local", [str(DATA)])):
        argv = data_run(
            {**config, "inputs": inputs, "output": str(tmp_path / name)}, tmp_path / f"{name}.yaml"
        )
        runs[name] = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=500
        )
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    assert "23 docs in, 17 kept, 6 dropped" in runs["s3"].stdout
    assert _texts(tmp_path / "s3") == _texts(tmp_path / "local")
