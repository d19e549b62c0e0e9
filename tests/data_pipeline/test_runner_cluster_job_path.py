"""The Ray Job recipe as the README and docs/cluster.md write it (issue 33 item 7), on a head
started without the project on its PATH (`.venv/bin/ray start`, a service manager): the job's
command runs in a shell on the head with that PATH, so a bare `pretrain` is exit 127, and the
documented `"$(command -v pretrain)" data run ...` (the absolute path, expanded by the user's
shell) runs the data job and writes its shards.

The head is the loopback-only one of test_runner_cluster_job.py (`_cluster`), ended by its own
process group, never `ray stop` (which ends every Ray on the machine, other tests' too)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pretrain.artifacts import shards
from tests.data_pipeline.raytools import (
    DATA,
    EMBEDDED_CONFIG,
    REPO,
    clean_env,
    data_run,
    token_home,
)
from tests.data_pipeline.test_runner_cluster_job import SUMMARY, _cluster

SUBMIT = "ray job submit --address http://HEAD_IP:8265 -- "


def _documented(doc: Path) -> str:
    """The `ray job submit` line `doc` shows for a config on shared storage."""
    lines = [line for line in doc.read_text().splitlines() if line.startswith(SUBMIT)]
    assert len(lines) == 1, (doc, lines)
    return lines[0].split("#")[0].strip()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_documented_ray_job_runs_on_a_head_without_the_venv_on_path(tmp_path: Path) -> None:
    command = _documented(REPO / "README.md")
    assert _documented(REPO / "docs" / "cluster.md") == command
    assert command.endswith(" data run /shared/CONFIG.yaml"), command
    config = tmp_path / "job.yaml"
    data_run({**EMBEDDED_CONFIG, "inputs": [str(DATA)], "output": str(tmp_path / "job")}, config)
    home = token_home(tmp_path / "home")
    user = {**clean_env(home), "RAY_AUTH_MODE": "token"}  # pretrain on PATH, as README's shell
    head = {**clean_env(home), "PATH": "/usr/bin:/bin"}  # no venv: `.venv/bin/ray start`

    def submit(line: str, url: str) -> subprocess.CompletedProcess[str]:
        line = line.replace("http://HEAD_IP:8265", url).replace("/shared/CONFIG.yaml", str(config))
        return subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env=user,
            capture_output=True,
            text=True,
            timeout=900,
        )

    with _cluster(head, tmp_path) as url:
        bare = submit(f"{SUBMIT}pretrain data run /shared/CONFIG.yaml", url)
        documented = submit(command, url)
    said = bare.stdout + bare.stderr
    assert bare.returncode != 0 and "exit code 127" in said, said[-2000:]  # the head's PATH
    said = documented.stdout + documented.stderr
    assert documented.returncode == 0 and "succeeded" in said, said[-3000:]
    assert SUMMARY in said, said[-3000:]
    written = shards.open(tmp_path / "job")  # every byte checked against its manifest
    assert sum(pq.read_metadata(p).num_rows for p in written.shard_paths) == 17
