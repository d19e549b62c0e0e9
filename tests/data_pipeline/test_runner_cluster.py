"""A `ray start --head` cluster on loopback, driven with --ray-address, gives the same shards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(out: Path) -> dict:
    return {
        "inputs": [str(DATA)],
        "output": str(out),
        "shard_rows": 4,
        "batch_rows": 3,
        "ray": {"timeout_s": 300},
    }


def _shards(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*.parquet"))
        if ".parts" not in p.parts
    }


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_loopback_cluster_matches_the_embedded_default(ray_local, tmp_path) -> None:
    embedded = run_pipeline(
        PipelineConfig.model_validate(_config(tmp_path / "embedded")), progress=False
    )
    port = _free_port()
    temp_dir = Path("/tmp") / f"ray-h1-{port}"
    head = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            "--object-store-memory=300000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        config = tmp_path / "pipeline.yaml"
        config.write_text(json.dumps(_config(tmp_path / "cluster")))
        env = {**os.environ, "RAY_ADDRESS": ""}
        for _ in range(60):  # the head takes a few seconds to accept drivers
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pretrain.cli",
                    "data",
                    "run",
                    str(config),
                    "--ray-address",
                    f"127.0.0.1:{port}",
                ],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=400,
            )
            if run.returncode == 0 or "ConnectionError" not in run.stderr:
                break
            time.sleep(2)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "23 docs in, 17 kept, 6 dropped" in run.stdout
    finally:
        os.killpg(head.pid, 15)
        head.wait(60)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert _shards(tmp_path / "cluster") == _shards(tmp_path / "embedded")
    assert embedded.ledger["documents_kept"] == 17
