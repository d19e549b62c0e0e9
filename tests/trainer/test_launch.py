"""`pretrain launch` through torchrun: TP=2 smoke on one node; two agents rendezvous as two nodes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import yaml

from pretrain.manifest import load_manifest
from pretrain_app.cli import main
from tests.trainer.trainer_testlib import losses, tiny_config


def _write(tmp_path, config) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_smoke_tp2_through_torchrun(tmp_path, capsys):
    run_dir = tmp_path / "run"
    config = tiny_config(run_dir, parallel={"tensor": 2, "gpus_per_node": 2})
    assert main(["launch", _write(tmp_path, config), "--smoke"]) == 0
    smoke = load_manifest(run_dir / "smoke")["smoke"]
    assert smoke["passed"] and smoke["world_size"] == 2
    assert smoke["probe_loss_after_reload"] == pytest.approx(smoke["probe_loss_before_save"])
    assert smoke["probe_loss_after_extra_step"] != smoke["probe_loss_before_save"]
    assert smoke["allreduce"]["busbw_GBps"] > 0


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_torchrun_agents_rendezvous_as_two_nodes(tmp_path):
    run_dir = tmp_path / "run"
    config = tiny_config(run_dir, parallel={"nodes": 2, "gpus_per_node": 1})
    path = _write(tmp_path, config)
    endpoint = f"127.0.0.1:{_port()}"
    argv = [
        sys.executable,
        "-m",
        "pretrain_app",
        "launch",
        path,
        "--nnodes",
        "2",
        "--nproc",
        "1",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        "two-agents",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [agent.communicate(timeout=240)[0] for agent in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    manifest = load_manifest(run_dir)
    assert manifest["world_size"] == 2
    per_step = losses(run_dir)
    assert sorted(per_step) == [1, 2, 3, 4, 5, 6]
    assert per_step[6] < per_step[1] - 0.05
