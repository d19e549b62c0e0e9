"""`ray job submit -- pretrain data run CONFIG` against a `ray start --head` cluster on loopback
(dashboard and job server on 127.0.0.1, token authentication on), from a fresh shell, as the
README's cluster section says:

- the head listens on loopback only (raytools.start_node's `loopback_only`: every server of it,
  and the RAY_ADDRESS its job server gives a job, on 127.0.0.1);
- the head is started without the project on its PATH (`.venv/bin/ray start`, a service manager):
  the job's command runs in a shell on the head with that PATH, so a bare `pretrain` is exit 127,
  and the `"$(command -v pretrain)" data run ...` line that README.md and docs/cluster.md show (the
  absolute path, expanded by the user's shell) runs the data job;
- the job's driver runs on the cluster, connects through the RAY_ADDRESS the job server gives it
  with the cluster's token, and writes the same shards, rejects and ledger as an embedded run;
- a shell holding the token but not `RAY_AUTH_MODE=token` is refused by the job server, and so is
  one with the wrong token; nothing is run;
- a job reading `s3://` inputs and writing an `s3://` output on a real S3-compatible server (moto),
  its config uploaded with `--working-dir`, the store's endpoint given with `--runtime-env-json`
  and its credentials in the node's environment, writes the objects of the same embedded run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from tests.data_pipeline.raytools import (
    DATA,
    EMBEDDED_CONFIG,
    RAY,
    REPO,
    HeadExited,
    clean_env,
    data_run,
    free_port,
    listening,
    outputs,
    ray_processes,
    start_node,
    stop_node,
    token_home,
    wait_for_head,
    wait_for_nodes,
)
from tests.data_pipeline.s3tools import KEYS, s3_env, s3_filesystem, upload_inputs
from tests.data_pipeline.test_runner_cluster_s3_out import _objects, _published

pytestmark = pytest.mark.serial

CONFIG = EMBEDDED_CONFIG
SUMMARY = "pretrain data run: 23 docs in, 17 kept, 6 dropped"
LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


def _ray(args: list[str], env: dict[str, str], cwd: Path, timeout: int = 120):
    return subprocess.run(
        [str(RAY), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _wait_for_job_server(url: str, token: str, head: subprocess.Popen) -> None:
    """Until the job server lists jobs (what `ray job list` asks it, with the cluster's token).
    Asked here, not by `ray job list` every 2 s: each of those imported Ray (seconds of CPU)
    while the head's dashboard started on 2 cores."""
    jobs = urllib.request.Request(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    failed: Exception | None = None
    for _ in range(900):
        if head.poll() is not None:
            raise HeadExited(f"`ray start --head` exited with {head.returncode}")
        try:
            with urllib.request.urlopen(jobs, timeout=10) as answer:
                json.load(answer)
                return
        except (OSError, ValueError) as exc:
            failed = exc
        time.sleep(0.2)
    raise AssertionError(f"job server at {url} never answered: {failed}")


@contextlib.contextmanager
def _cluster(env: dict[str, str]) -> Iterator[str]:
    """A `ray start --head` with the job server on 127.0.0.1: its URL. On a loaded machine Ray's
    client server can time out while the head starts, and `ray start` then ends the head: such a
    head is started again (3 tries); one that dies later fails the test."""
    for attempt in range(1, 4):
        port, dashboard = free_port(), free_port()
        root = Path("/tmp") / f"rj-{port}"  # short: Ray's socket paths live under the temp dir
        head = start_node(
            root / "head", env, 2, port=port, dashboard_port=dashboard, loopback_only=True
        )
        url = f"http://127.0.0.1:{dashboard}"
        try:
            wait_for_head(f"127.0.0.1:{port}", head)
            wait_for_nodes(head)
            token = (Path(env["HOME"]) / ".ray" / "auth_token").read_text().strip()
            _wait_for_job_server(url, token, head)
            break
        except HeadExited:
            stop_node(head)
            shutil.rmtree(root, ignore_errors=True)
            if attempt == 3:
                raise
    try:
        yield url
        # every server of the head (GCS, raylet, agents, client and job servers): loopback only
        bound = listening([psutil.Process(head.pid), *ray_processes(psutil.Process(head.pid))])
        assert bound and all(ip in LOOPBACK for _, ip, _ in bound), sorted(bound)
    finally:
        stop_node(head)
        shutil.rmtree(root, ignore_errors=True)


PRETRAIN = str(RAY.with_name("pretrain"))
"""What `"$(command -v pretrain)"` expands to in the user's shell (clean_env's PATH)."""
SUBMIT = "ray job submit --address http://HEAD_IP:8265 -- "


def _submit(url: str, env: dict[str, str], cwd: Path, config: Path | str, *opts: str):
    """What the README tells a user to type, with the program's absolute path."""
    argv = ["job", "submit", "--address", url, *opts, "--", PRETRAIN, "data", "run", str(config)]
    return _ray(argv, env, cwd, timeout=700)


def _documented(doc: Path) -> str:
    """The `ray job submit` line `doc` shows for a config on shared storage."""
    lines = [line for line in doc.read_text().splitlines() if line.startswith(SUBMIT)]
    assert len(lines) == 1, (doc, lines)
    return lines[0].split("#")[0].strip()


def _shell(line: str, url: str, config: Path, env: dict[str, str], cwd: Path):
    """`line` typed into the user's shell, against this head and config."""
    line = line.replace("http://HEAD_IP:8265", url).replace("/shared/CONFIG.yaml", str(config))
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=700
    )


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ray_job_submit_runs_the_data_job_on_the_cluster(tmp_path, s3_server, embedded_out) -> None:
    home = token_home(tmp_path / "home")
    env = clean_env(home)
    local = {**CONFIG, "inputs": [str(DATA)]}  # embedded_out: this job, embedded
    on_s3 = {**CONFIG, "inputs": ["s3://crawl/in"]}
    upload_inputs(s3_server)
    argv = data_run({**on_s3, "output": str(tmp_path / "embedded-s3")}, tmp_path / "s3.yaml")
    # the embedded s3 run (its own local Ray) while the cluster starts; its output in a file
    said_s3 = (tmp_path / "embedded-s3.out").open("w+")
    embedded_s3 = subprocess.Popen(
        argv, cwd=REPO, env={**env, **s3_env(s3_server)}, stdout=said_s3, stderr=said_s3
    )

    job_config = tmp_path / "job.yaml"
    data_run({**local, "output": str(tmp_path / "job")}, job_config)
    upload = tmp_path / "upload"  # the user's job directory: only the config, uploaded
    upload.mkdir()
    data_run({**on_s3, "output": "s3://crawl/out"}, upload / "s3.yaml")
    user = {**env, "RAY_AUTH_MODE": "token"}  # what the README tells a user to set
    command = _documented(REPO / "README.md")
    assert _documented(REPO / "docs" / "cluster.md") == command
    assert command.endswith(" data run /shared/CONFIG.yaml"), command
    # credentials in the node's environment, the store's endpoint for the job (as the README says);
    # no venv on the head's PATH
    with contextlib.ExitStack() as stack:
        stack.callback(embedded_s3.kill)  # a no-op once it has ended
        url = stack.enter_context(_cluster({**env, **KEYS, "PATH": "/usr/bin:/bin"}))
        said_s3.seek(0)
        assert embedded_s3.wait(timeout=600) == 0, said_s3.read()[-2000:]
        other = token_home(tmp_path / "other-home")  # RAY_AUTH_MODE=token, another token
        # the refused submissions and the bare one (it fails at once) beside the documented one
        with ThreadPoolExecutor(3) as beside:
            unset = beside.submit(_submit, url, env, tmp_path, job_config)  # token, no mode
            wrong = beside.submit(
                _submit, url, {**clean_env(other), "RAY_AUTH_MODE": "token"}, tmp_path, job_config
            )
            bare = beside.submit(
                _shell,
                f"{SUBMIT}pretrain data run /shared/CONFIG.yaml",
                url,
                job_config,
                user,
                tmp_path,
            )
            submitted = _shell(command, url, job_config, user, tmp_path)
        store = {k: v for k, v in s3_env(s3_server).items() if k not in KEYS}
        runtime_env = json.dumps({"env_vars": store})
        s3_job = _submit(
            url,
            user,
            tmp_path,
            "s3.yaml",
            "--working-dir",
            str(upload),
            "--runtime-env-json",
            runtime_env,
        )
        jobs = _ray(["job", "list", "--address", url], user, tmp_path).stdout
    for refused, says in (
        (unset.result(), "RAY_AUTH_MODE is currently 'disabled'"),
        (wrong.result(), "Invalid"),
    ):
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "AuthenticationError" in said, said[-2000:]
        assert says in said, said[-2000:]  # Ray's own message says what to set
    said = bare.result().stdout + bare.result().stderr
    assert bare.result().returncode != 0 and "exit code 127" in said, said[-2000:]  # head's PATH
    said = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, said[-3000:]
    # the bare one, the documented one and the s3 one ran; the refused ones never did
    assert jobs.count("entrypoint='") == 3, jobs
    assert s3_server in jobs  # the job server keeps and shows --runtime-env-json values
    assert SUMMARY in said and "succeeded" in said, said[-3000:]
    assert outputs(tmp_path / "job") == outputs(embedded_out)

    said = s3_job.stdout + s3_job.stderr
    assert s3_job.returncode == 0 and SUMMARY in said, said[-3000:]
    written = _published(_objects(s3_filesystem(s3_server), "crawl/out"))
    assert written == outputs(tmp_path / "embedded-s3")
