"""Helpers for tests that drive `pretrain data run` as a user would: a subprocess with a clean
environment (nothing left by an earlier `ray.init()`), real Ray processes, real sockets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
DATA = REPO / "tests" / "data" / "data_pipeline"
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""In a Ray process's environment: a loopback address stays loopback (see `start_node`)."""
EMBEDDED_CONFIG = {"shard_rows": 4, "batch_rows": 3, "ray": {"timeout_s": 300}}
"""The job on DATA of the cluster, Ray Job and s3 tests; conftest's `embedded_out` runs it once."""
DEDUP_CONFIG = {
    "inputs": [str(DATA)],
    "shard_rows": 4,
    "batch_rows": 3,
    "stages": {"extract": {}, "dedup": {"num_partitions": 9}},
}
"""The dedup exchange's job on DATA (9 partitions, most of them empty); conftest's `dedup_out`
runs it once."""


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


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """What a fresh login shell has: no RAY_* variables, its own HOME (so its own ~/.ray)."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    home.mkdir(parents=True, exist_ok=True)
    return {**env, **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def data_run(config: dict, path: Path, *extra: str) -> list[str]:
    """The command line of `pretrain data run` on `config` written to `path`."""
    path.write_text(json.dumps(config))
    return [sys.executable, "-m", "pretrain_app", "data", "run", str(path), *extra]


def ray_processes(root: psutil.Process) -> list[psutil.Process]:
    """Ray's processes under `root` (gcs_server, raylet, agents, workers, dashboard/monitors)."""
    found = []
    try:
        children = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for proc in children:
        try:
            name = proc.name()
            if (
                name in ("gcs_server", "raylet")
                or name.startswith("ray::")
                or "/ray/" in " ".join(proc.cmdline()[:3])
            ):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def listening(procs: list[psutil.Process]) -> set[tuple[str, str, int]]:
    """(process name, ip, port) of every listening TCP socket of `procs`."""
    out = set()
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out.add((proc.name(), conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_gone(procs: list[psutil.Process], bound_s: float) -> list[psutil.Process]:
    """Wait up to `bound_s` for `procs` to end; returns those still alive (killed afterwards)."""
    deadline = time.monotonic() + bound_s
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = alive(procs)
    for proc in left:
        proc.kill()
    return left


def start_node(
    temp_dir: Path,
    env: dict[str, str],
    cpus: int,
    *,
    port: int = 0,
    head_address: str = "",
    dashboard_port: int = 0,
    loopback_only: bool = False,
) -> subprocess.Popen[bytes]:
    """`ray start --head` (or a node joining `head_address`) on loopback, in its own process
    group so the test can end exactly what it started (never `ray stop`: it kills every Ray
    process on the machine).

    `--node-ip-address=127.0.0.1` alone does not keep a node on loopback: Ray 2.60's `ray start`
    (and `ray.init(address=...)`, `ray status --address`) pass every loopback address through
    `services.resolve_ip_for_localhost`, which maps it to the machine's address unless
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (`ray_constants.ENABLE_RAY_CLUSTER`). Measured on a head
    with the job server: without it the GCS, raylet, agents and client server listen on `::` /
    0.0.0.0 / the machine's IP and a job's RAY_ADDRESS is the machine's IP; with it
    (`loopback_only`) every one listens on 127.0.0.1 and RAY_ADDRESS is 127.0.0.1. It cannot
    serve a cluster of two nodes: under it `ray start --address` refuses to join ("Multi-node Ray
    clusters are not supported on Windows and OSX"), and without it the joining node maps the
    head's 127.0.0.1 to the machine's IP, where a loopback-only head does not listen. A driver that
    connects by address needs the variable too (`LOOPBACK_ONLY`), so a test of what a user's own
    shell does (tests/data_pipeline/test_runner_cluster_nodes.py) keeps a head that is not."""
    if loopback_only and not head_address:
        env = {**env, **LOOPBACK_ONLY}
    role = [f"--address={head_address}"] if head_address else ["--head", f"--port={port}"]
    if not head_address:  # Ray's client server defaults to port 10001: two heads would collide
        role.append(f"--ray-client-server-port={free_port()}")
    # So does the dashboard agent's HTTP port (52365): with ray[default] installed, any other Ray
    # on the machine (the test session's own) holds it, this node's agent cannot bind, and the job
    # server answers every submission with "No available agent to submit job"
    role.append(f"--dashboard-agent-listen-port={free_port()}")
    # Ray's Unix sockets live under the temp dir: keep it short (a socket path has 107 bytes)
    assert len(str(temp_dir)) < 40, f"temp dir {temp_dir} too long for Ray's socket paths"
    temp_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = temp_dir.with_name(temp_dir.name + ".log")
    log = open(log_path, "wb")  # noqa: SIM115 - child holds it
    node = subprocess.Popen(
        [
            str(RAY),
            "start",
            *role,
            "--block",
            f"--num-cpus={cpus}",
            "--node-ip-address=127.0.0.1",
            *([] if head_address else _dashboard(dashboard_port)),
            f"--temp-dir={temp_dir}",
            "--object-store-memory=200000000",
            "--disable-usage-stats",
        ],
        env={**env, "PYTHONUNBUFFERED": "1"},  # `wait_for_nodes` reads its log as it goes
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _LOGS[node.pid] = log_path
    return node


_LOGS: dict[int, Path] = {}
"""The log file of each `start_node` process, by pid."""


def _dashboard(port: int) -> list[str]:
    """Head flags: no dashboard, or one (with the job server) on loopback at `port`."""
    if not port:
        return ["--include-dashboard=false"]
    return ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={port}"]


def stop_node(node: subprocess.Popen[bytes]) -> None:
    """End a node started by `start_node`, its whole process group."""
    try:
        procs = [psutil.Process(node.pid), *ray_processes(psutil.Process(node.pid))]
    except psutil.NoSuchProcess:  # `ray start` exited (and was reaped): its group may be left
        procs = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        node.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGKILL)
    node.wait(30)
    wait_gone(procs, 10)


def token_home(home: Path) -> Path:
    """A HOME holding a Ray auth token, as after `ray get-auth-token --generate`."""
    subprocess.run(
        [str(RAY), "get-auth-token", "--generate"], env=clean_env(home), check=True, timeout=60
    )
    assert (home / ".ray" / "auth_token").is_file()
    return home


class HeadExited(AssertionError):
    """The `ray start --head` process ended while the test waited for its cluster."""


def wait_for_head(address: str, node: subprocess.Popen[bytes] | None = None) -> None:
    host, _, port = address.rpartition(":")
    for _ in range(120):
        if node is not None and node.poll() is not None:
            raise HeadExited(f"`ray start` for {address} exited with {node.returncode}")
        with contextlib.suppress(OSError):
            socket.create_connection((host, int(port)), timeout=5).close()
            return
        time.sleep(1)
    raise AssertionError(f"head at {address} did not come up")


STARTED = b"Ray runtime started."
"""What `ray start` prints once its node's raylet has registered with the cluster's GCS (Ray
2.60's `Node` waits for that, 30 s at most, before `ray start` says so): from then on the
cluster lists the node as alive, as `ray status` does."""


def wait_for_nodes(*started: subprocess.Popen[bytes]) -> None:
    """Wait until each of the `started` `ray start` processes says its node is up (`STARTED`, in
    its log); fail at once (HeadExited) if one exited (Ray 2.60 ends a node whose raylet took
    over 30 s to register, a fixed wait: "The current node timed out during startup"). Reading
    the logs costs nothing; polling `ray status` (a Python process importing Ray, every 2 s) took
    CPU from the starting nodes on 2 cores."""
    for _ in range(1500):
        for proc in started:
            if proc.poll() is not None:
                raise HeadExited(f"`ray start` ({_LOGS[proc.pid]}) exited with {proc.returncode}")
        if all(STARTED in _LOGS[proc.pid].read_bytes() for proc in started):
            return
        time.sleep(0.2)
    said = {str(_LOGS[p.pid]): _LOGS[p.pid].read_bytes()[-500:] for p in started}
    raise AssertionError(f"not every node started in 300 s: {said}")
