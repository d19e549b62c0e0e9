"""`pretrain data run --ray-address` against a real `ray start --head` cluster on loopback, driven
from a fresh shell (no RAY_* variables), as a user types it: with token authentication on (the
default once a token exists) the driver finds the token; without one it says in one line what to
set; an address where nothing listens is one line at once.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import (
    DATA,
    EMBEDDED_CONFIG,
    REPO,
    clean_env,
    data_run,
    free_port,
    start_node,
    stop_node,
    wait_for_head,
    wait_for_nodes,
)
from tests.data_pipeline.raytools import token_home as make_token_home

pytestmark = pytest.mark.serial


def outputs(out: Path) -> dict[str, bytes]:
    """What must not depend on where the job ran: shards, rejects, ledger."""
    files = sorted([*out.glob("data/*.parquet"), *out.glob("_rejects/*.pq")])
    found = {p.relative_to(out).as_posix(): p.read_bytes() for p in files}
    found["ledger.json"] = (out / "ledger.json").read_bytes()
    return found


def run_cli(
    argv: list[str], env: dict[str, str], timeout: int = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def token_home(tmp_path: Path) -> Path:
    """A HOME holding a Ray auth token, as after `ray get-auth-token --generate`."""
    return make_token_home(tmp_path / "home")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fresh_shell_reaches_a_token_cluster_or_says_what_to_set(
    tmp_path, token_home, embedded_out
) -> None:
    env = clean_env(token_home)
    config = {**EMBEDDED_CONFIG, "inputs": [str(DATA)]}  # embedded_out: the same job, embedded

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
    assert outputs(tmp_path / "cluster") == outputs(embedded_out)
    assert refused.returncode == 2, refused.stderr[-2000:]
    error = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "RAY_AUTH_MODE=token" in error[0], refused.stderr[-2000:]
    assert "auth_token" in error[0] and "Traceback" not in refused.stderr

    nowhere = f"127.0.0.1:{free_port()}"
    nobody = data_run({**config, "output": str(tmp_path / "y")}, tmp_path / "y.yaml")
    nobody = run_cli([*nobody, "--ray-address", nowhere], env, timeout=120)
    assert nobody.returncode == 2 and "nothing accepts connections" in nobody.stderr
