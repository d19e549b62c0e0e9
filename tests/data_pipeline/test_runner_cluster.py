"""`pretrain data run --ray-address` against real Ray clusters on loopback, driven from a fresh
shell (no RAY_* variables), as a user types it:

- a `ray start --head` cluster with token authentication on (the default once a token exists):
  the driver finds the token; without one it says in one line what to set;
- a two-node cluster (a head and a node joined with `ray start --address`, each with its own
  temp dir and CPUs) running every stage with models trained here (dedup and perplexity
  included): shards, rejects and ledger byte-identical to the embedded local run, also when the
  second node's raylet is SIGKILLed mid-run.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.data_pipeline.raytools import (
    DATA,
    RAY,
    REPO,
    alive,
    clean_env,
    data_run,
    free_port,
    ray_processes,
    start_node,
    stop_node,
)


def outputs(out: Path) -> dict[str, bytes]:
    """What must not depend on where the job ran: shards, rejects, ledger."""
    files = sorted([*out.glob("shards/*.parquet"), *out.glob("rejects/*.parquet")])
    found = {p.relative_to(out).as_posix(): p.read_bytes() for p in files}
    found["ledger.json"] = (out / "ledger.json").read_bytes()
    return found


def run_cli(
    argv: list[str], env: dict[str, str], timeout: int = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def wait_for_head(address: str) -> None:
    host, _, port = address.rpartition(":")
    for _ in range(120):
        with contextlib.suppress(OSError):
            socket.create_connection((host, int(port)), timeout=5).close()
            return
        time.sleep(1)
    raise AssertionError(f"head at {address} did not come up")


def wait_for_nodes(address: str, env: dict[str, str], nodes: int) -> None:
    status = ""
    for _ in range(60):
        status = subprocess.run(
            [str(RAY), "status", f"--address={address}"],
            env={**env, "RAY_AUTH_MODE": "token"},
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        if status.count(" node_") >= nodes:
            return
        time.sleep(2)
    raise AssertionError(f"cluster at {address} never had {nodes} nodes: {status}")


@pytest.fixture
def token_home(tmp_path: Path) -> Path:
    """A HOME holding a Ray auth token, as after `ray get-auth-token --generate`."""
    home = tmp_path / "home"
    env = clean_env(home)
    subprocess.run([str(RAY), "get-auth-token", "--generate"], env=env, check=True, timeout=60)
    assert (home / ".ray" / "auth_token").is_file()
    return home


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fresh_shell_reaches_a_token_cluster_or_says_what_to_set(tmp_path, token_home) -> None:
    env = clean_env(token_home)
    config = {"inputs": [str(DATA)], "shard_rows": 4, "batch_rows": 3, "ray": {"timeout_s": 300}}
    embedded = run_cli(
        data_run({**config, "output": str(tmp_path / "embedded")}, tmp_path / "e.yaml"), env
    )
    assert embedded.returncode == 0, embedded.stderr[-2000:]

    port = free_port()
    head = start_node(Path("/tmp") / f"ray-tok-{port}", env, 2, port=port)
    address = f"127.0.0.1:{port}"
    try:
        wait_for_head(address)
        wait_for_nodes(address, env, 1)
        argv = data_run(
            {**config, "output": str(tmp_path / "cluster")}, tmp_path / "c.yaml", "--ray-address"
        )
        run = run_cli([*argv, address], env)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "23 docs in, 17 kept, 6 dropped" in run.stdout

        # Another machine's shell: same command, no token there -> one line, exit 2.
        refused = run_cli(
            [
                *data_run({**config, "output": str(tmp_path / "x")}, tmp_path / "x.yaml"),
                "--ray-address",
                address,
            ],
            clean_env(tmp_path / "other-home"),
        )
    finally:
        stop_node(head)
        shutil.rmtree(Path("/tmp") / f"ray-tok-{port}", ignore_errors=True)
    assert outputs(tmp_path / "cluster") == outputs(tmp_path / "embedded")
    assert refused.returncode == 2, refused.stderr[-2000:]
    error = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "RAY_AUTH_MODE=token" in error[0], refused.stderr[-2000:]
    assert "auth_token" in error[0] and "Traceback" not in refused.stderr

    nowhere = f"127.0.0.1:{free_port()}"
    nobody = data_run({**config, "output": str(tmp_path / "y")}, tmp_path / "y.yaml")
    nobody = run_cli([*nobody, "--ray-address", nowhere], env, timeout=120)
    assert nobody.returncode == 2 and "nothing accepts connections" in nobody.stderr


@pytest.fixture(scope="module")
def every_stage(tmp_path_factory) -> dict:
    """A config enabling every stage, with fastText and KenLM models trained here."""
    from data_pipeline.demo import demo_config
    from data_pipeline.models.demo_assets import build_demo_models
    from pretrain.demo import SAMPLE_FILES, sample_dir

    base = tmp_path_factory.mktemp("every-stage")
    raw = base / "raw"
    raw.mkdir()
    for name in SAMPLE_FILES:
        shutil.copyfile(sample_dir() / name, raw / name)
    models = build_demo_models(raw, base / "models")
    config = demo_config(raw, base / "unused", models).model_dump(mode="json")
    assert {"dedup", "perplexity", "domain", "quality"} <= set(
        k for k, v in config["stages"].items() if v is not None
    )
    config.update(shard_rows=60, batch_rows=32, ray={"timeout_s": 600, "num_cpus": 2})
    return config


@pytest.fixture(scope="module")
def embedded_every_stage(every_stage, tmp_path_factory) -> dict[str, bytes]:
    base = tmp_path_factory.mktemp("embedded")
    env = clean_env(base / "home")
    run = run_cli(data_run({**every_stage, "output": str(base / "out")}, base / "p.yaml"), env)
    assert run.returncode == 0, run.stderr[-2000:]
    return outputs(base / "out")


def _two_nodes(tmp_path: Path, env: dict[str, str]):
    port = free_port()
    head = start_node(tmp_path / "ray-head", env, 2, port=port)
    address = f"127.0.0.1:{port}"
    wait_for_head(address)
    node = start_node(tmp_path / "ray-node", env, 2, head_address=address)
    wait_for_nodes(address, env, 2)
    return address, head, node


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_node_cluster_matches_embedded_run(
    tmp_path, token_home, every_stage, embedded_every_stage
) -> None:
    env = clean_env(token_home)
    address, head, node = _two_nodes(tmp_path, env)
    try:
        argv = data_run({**every_stage, "output": str(tmp_path / "out")}, tmp_path / "p.yaml")
        run = run_cli([*argv, "--ray-address", address], env)
    finally:
        stop_node(node)
        stop_node(head)
    assert run.returncode == 0, run.stderr[-3000:]
    assert outputs(tmp_path / "out") == embedded_every_stage


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_second_node_killed_mid_run_still_gives_the_same_bytes(
    tmp_path, token_home, every_stage, embedded_every_stage
) -> None:
    env = clean_env(token_home)
    address, head, node = _two_nodes(tmp_path, env)
    try:
        argv = data_run({**every_stage, "output": str(tmp_path / "out")}, tmp_path / "p.yaml")
        run = subprocess.Popen(
            [*argv, "--ray-address", address],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed = _kill_raylet_once_it_works(psutil.Process(node.pid), run)
        out, err = run.communicate(timeout=1100)
    finally:
        stop_node(node)
        stop_node(head)
    assert killed, "the second node never ran a stage worker before the job ended"
    assert run.returncode == 0, err[-3000:]
    assert outputs(tmp_path / "out") == embedded_every_stage


def _kill_raylet_once_it_works(node: psutil.Process, run: subprocess.Popen) -> bool:
    """SIGKILL the node's raylet as soon as a stage actor runs on it; False if the job ended."""
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        procs = alive(ray_processes(node))
        if any("MapStagesWorker" in p.name() for p in procs):
            for proc in procs:
                if proc.name() == "raylet":
                    proc.send_signal(signal.SIGKILL)
                    return True
        time.sleep(0.2)
    return False
