"""A real S3-compatible server for tests: moto in server mode, a separate process on loopback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from tests.data_pipeline.raytools import DATA, REPO, free_port

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@contextlib.contextmanager
def moto_server(serial: bool = False) -> Iterator[str]:
    """The endpoint URL of a fresh moto server, stopped on exit; `serial`: one request at a time,
    so conditional writes are atomic as on AWS S3 (tests/data_pipeline/moto_serial.py)."""
    port = free_port()
    argv = (
        ["-m", "tests.data_pipeline.moto_serial", "127.0.0.1", str(port)]
        if serial
        else ["-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    )
    with serve(argv, port) as endpoint:
        yield endpoint


@contextlib.contextmanager
def moto_server_frozen(bucket: str) -> Iterator[str]:
    """The endpoint URL of a fresh moto server whose objects in `bucket` all carry one fixed
    Last-Modified (tests/data_pipeline/moto_clock.py): every rewrite lands in the same second."""
    port = free_port()
    argv = ["-m", "tests.data_pipeline.moto_clock", "127.0.0.1", str(port), bucket]
    with serve(argv, port) as endpoint:
        yield endpoint


@contextlib.contextmanager
def serve(argv: list[str], port: int) -> Iterator[str]:
    """`python ARGV` as a server on 127.0.0.1:`port`: its endpoint URL once it accepts
    connections, the process stopped on exit."""
    server = subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(240):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            if server.poll() is not None:
                raise AssertionError(f"moto server exited with {server.returncode}")
            time.sleep(0.5)
        else:
            raise AssertionError(f"moto server on 127.0.0.1:{port} did not come up")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def s3_env(endpoint: str) -> dict[str, str]:
    """What a user exports to reach an S3-compatible store."""
    return {**KEYS, "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}


def s3_filesystem(endpoint: str):
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )


def upload_inputs(endpoint: str) -> str:
    """The test corpus's input files under s3://crawl/in (as a user's crawl would be): that URI."""
    s3 = s3_filesystem(endpoint)
    s3.create_dir("crawl")
    for path in sorted(DATA.iterdir()):
        if path.suffix in (".gz", ".jsonl", ".parquet"):
            with s3.open_output_stream(f"crawl/in/{path.name}", compression=None) as f:
                f.write(path.read_bytes())
    return "s3://crawl/in"
