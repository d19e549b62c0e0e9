"""`ray job submit -- pretrain data run CONFIG` against a `ray start --head` cluster on loopback
(dashboard and job server on 127.0.0.1, token authentication on), from a fresh shell: the job's
driver runs on the cluster, connects through RAY_ADDRESS with the cluster's token, and writes the
same shards, rejects and ledger as an embedded local run."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import (
    DATA,
    RAY,
    REPO,
    clean_env,
    data_run,
    free_port,
    start_node,
    stop_node,
    token_home,
    wait_for_head,
    wait_for_nodes,
)
from tests.data_pipeline.test_runner_cluster import outputs


def _wait_for_job_server(url: str, env: dict[str, str]) -> None:
    listed = None
    for _ in range(90):
        listed = subprocess.run(
            [str(RAY), "job", "list", "--address", url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if listed.returncode == 0:
            return
        time.sleep(2)
    raise AssertionError(f"job server at {url} never answered: {listed and listed.stderr[-500:]}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ray_job_submit_runs_the_data_job_on_the_cluster(tmp_path) -> None:
    home = token_home(tmp_path / "home")
    env = clean_env(home)
    config = {"inputs": [str(DATA)], "shard_rows": 4, "batch_rows": 3, "ray": {"timeout_s": 300}}
    argv = data_run({**config, "output": str(tmp_path / "embedded")}, tmp_path / "e.yaml")
    embedded = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert embedded.returncode == 0, embedded.stderr[-2000:]

    job_config = tmp_path / "job.yaml"
    data_run({**config, "output": str(tmp_path / "job")}, job_config)
    port, dashboard = free_port(), free_port()
    root = Path("/tmp") / f"rj-{port}"  # short: Ray's socket paths live under the temp dir
    head = start_node(root / "head", env, 2, port=port, dashboard_port=dashboard)
    url = f"http://127.0.0.1:{dashboard}"
    try:
        wait_for_head(f"127.0.0.1:{port}", head)
        wait_for_nodes(f"127.0.0.1:{port}", env, 1)
        user = {**env, "RAY_AUTH_MODE": "token"}  # what the README tells a user to set
        _wait_for_job_server(url, user)
        submitted = subprocess.run(
            [
                str(RAY),
                "job",
                "submit",
                "--address",
                url,
                "--",
                "pretrain",
                "data",
                "run",
                str(job_config),
            ],
            cwd=tmp_path,
            env=user,
            capture_output=True,
            text=True,
            timeout=700,
        )
    finally:
        stop_node(head)
        shutil.rmtree(root, ignore_errors=True)
    said = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, said[-3000:]
    assert "pretrain data run: 23 docs in, 17 kept, 6 dropped" in said, said[-3000:]
    assert "succeeded" in said
    assert outputs(tmp_path / "job") == outputs(tmp_path / "embedded")
