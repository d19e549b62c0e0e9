"""A `pretrain data run` frozen past its writer lock's lease (SIGSTOP of the driver and every Ray
process under it, as a paused VM would be) while writing an `s3://` output, on a real
S3-compatible server (moto, one request at a time):

- another machine's run (its own HOME) takes the lock over and finishes the output;
- the frozen run, resumed (SIGCONT), stops in one line ("lost its writer lock") and changes no
  object of the finished output: every object is byte for byte what the new holder left (the
  frozen job has another shard size, so any object of it would show), the published files equal
  a local run of the new holder's job, and `pretrain verify` passes.

With the fence removed (outstore not calling objectfence.fence) this test still passed once
(2026-12-02): on resuming, the frozen driver's heartbeat found the lock gone and stopped the run
before any of its processes wrote. It guards the outcome end to end; the fence itself is what
tests/pretrain/test_objectlock_fence.py breaks (two of its tests fail without it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run, ray_processes, wait_gone
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem
from tests.data_pipeline.test_runner_cluster_s3_out import _local, _objects, _published

BUCKET = "corpus"
URI = f"s3://{BUCKET}/runs/one"
LEASE = 20.0  # long enough that a loaded machine still renews every lease / 6
CONFIG = {"inputs": [str(DATA)], "batch_rows": 3, "ray": {"num_cpus": 1, "timeout_s": 300}}
FROZEN = {**CONFIG, "shard_rows": 6, "output": URI}
FINISHER = {**CONFIG, "shard_rows": 4, "output": URI, "overwrite": True}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


def _keys(s3) -> list[str]:
    from pyarrow import fs

    selector = fs.FileSelector(f"{BUCKET}/runs/one", recursive=True, allow_not_found=True)
    return [i.path for i in s3.get_file_info(selector) if i.type == fs.FileType.File]


def _lock_age(endpoint: str) -> float | None:
    """Seconds since the lock object was last written, on the store's clock (None: no lock)."""
    from pretrain import lockobject

    target = lockobject.target_of(URI)
    seen = lockobject.read_lock(lockobject.client_for(target), target)
    return None if seen is None else seen.age_s


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            proc.send_signal(sig)


def _frozen_tree(run: subprocess.Popen, s3) -> list[psutil.Process]:
    """Once the run has written a part object: its driver and Ray's processes, all stopped."""
    driver = psutil.Process(run.pid)
    deadline = time.monotonic() + 300
    while not _keys(s3):
        assert run.poll() is None, run.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the run never wrote an object"
        time.sleep(0.05)
    tree = [driver, *ray_processes(driver)]
    _signal_all(tree, signal.SIGSTOP)
    return tree


def test_a_frozen_run_resumed_after_a_takeover_writes_nothing(tmp_path, store, monkeypatch):
    for name, value in s3_env(store).items():
        monkeypatch.setenv(name, value)
    s3 = s3_filesystem(store)
    lease = {"PRETRAIN_LOCK_LEASE_S": str(LEASE)}
    frozen = subprocess.Popen(
        data_run(FROZEN, tmp_path / "a.yaml"),
        cwd=REPO,
        env=clean_env(tmp_path / "a", **s3_env(store), **lease),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tree = _frozen_tree(frozen, s3)
    local = tmp_path / "local"  # the finisher's job run locally, while the frozen lock ages
    argv = data_run({**FINISHER, "output": str(local)}, tmp_path / "local.yaml")
    reference_log = (tmp_path / "local.log").open("w")
    reference = subprocess.Popen(
        argv, cwd=REPO, env=clean_env(tmp_path / "l"), stdout=reference_log, stderr=reference_log
    )
    try:
        deadline = time.monotonic() + 300
        while (age := _lock_age(store)) is not None and age < LEASE:
            assert time.monotonic() < deadline, "the frozen run's lock never expired"
            time.sleep(0.5)
        reference.wait(600)  # not while the finisher's Ray starts (its start-up has a timeout)
        reference_log.close()
        argv = data_run(FINISHER, tmp_path / "b.yaml")
        env_b = clean_env(tmp_path / "b", **s3_env(store), **lease)
        finished = subprocess.run(argv, cwd=REPO, env=env_b, capture_output=True, text=True)
        assert finished.returncode == 0, finished.stderr[-2000:]
        assert "taking over the writer lock" in finished.stderr
        left = _objects(s3, f"{BUCKET}/runs/one")
    finally:
        _signal_all(tree, signal.SIGCONT)
    _, err = frozen.communicate(timeout=600)
    wait_gone(tree[1:], 60.0)  # nothing of the frozen job writes after this
    errors = [line for line in err.splitlines() if "error:" in line]
    assert frozen.returncode == 2 and len(errors) == 1, err[-3000:]
    assert errors[0].startswith("pretrain data run: error: stopped writing s3://corpus/runs/one")
    assert "lost its writer lock" in errors[0]
    assert _objects(s3, f"{BUCKET}/runs/one") == left  # not one object written or deleted
    assert _lock_age(store) is None  # the new holder released it; the frozen run left it alone
    manifest = json.loads(left["manifest.json"])
    assert set(manifest["files"]) == set(left) - {"manifest.json"}
    assert reference.returncode == 0, (tmp_path / "local.log").read_text()[-2000:]
    assert _published(left) == _published(_local(local))
    verify = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "verify", URI],
        cwd=REPO,
        env=env_b,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stderr[-2000:]
    assert os.environ.get("PRETRAIN_WRITER_LOCK") is None
