"""Two `pretrain data run` drivers "on two machines" (each its own HOME, so its own project cache
and local locks: nothing local can coordinate them) writing one `s3://` output on a real
S3-compatible server (moto, serving one request at a time so its conditional writes are atomic
as on AWS S3):

- started at once, exactly one runs; the other is refused in one line naming the holder, and
  nothing of it is written: the output is byte for byte the winner's job (the loser's job has a
  different shard size, so any object of it would show);
- a driver SIGKILLed mid-run leaves its lock: the next writer is refused naming the dead holder
  and the `pretrain unlock` line; after it, the re-run ends byte-identical to an uninterrupted
  run, and `pretrain verify` checks the output in the store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.data_pipeline.raytools import DATA, REPO, clean_env, data_run, ray_processes, wait_gone
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem
from tests.data_pipeline.test_runner_cluster_s3_out import _local, _objects, _published

BUCKET = "corpus"
URI = f"s3://{BUCKET}/runs/one"
CONFIG = {"inputs": [str(DATA)], "batch_rows": 3, "ray": {"num_cpus": 1, "timeout_s": 300}}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.serial]


@pytest.fixture
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, dict[str, bytes]]:
    """shard_rows -> the published files of that job run into a local directory (computed once)."""
    return {}


def _expected(reference: dict, shard_rows: int, tmp: Path) -> dict[str, bytes]:
    if shard_rows not in reference:
        out = tmp / f"local-{shard_rows}"
        argv = data_run({**CONFIG, "shard_rows": shard_rows, "output": str(out)}, tmp / "l.yaml")
        done = subprocess.run(
            argv, cwd=REPO, env=clean_env(tmp / "local"), capture_output=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        reference[shard_rows] = _published(_local(out))
    return reference[shard_rows]


def _machine(tmp: Path, name: str, endpoint: str) -> dict[str, str]:
    return clean_env(tmp / name, **s3_env(endpoint))


def _start(env: dict[str, str], shard_rows: int, tmp: Path, name: str) -> subprocess.Popen:
    argv = data_run({**CONFIG, "shard_rows": shard_rows, "output": URI}, tmp / f"{name}.yaml")
    return subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _lock_record(s3) -> dict | None:
    try:
        with s3.open_input_stream(f"{BUCKET}/runs/.one.lock") as handle:
            return json.loads(handle.read())
    except (FileNotFoundError, OSError, ValueError):
        return None


def _keys(s3) -> list[str]:
    from pyarrow import fs

    selector = fs.FileSelector(f"{BUCKET}/runs/one", recursive=True, allow_not_found=True)
    return [i.path for i in s3.get_file_info(selector) if i.type == fs.FileType.File]


def _wait_for(condition, what: str, procs: list[subprocess.Popen]):
    """`condition()` once it is true; fails once every one of `procs` has exited without it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        assert any(p.poll() is None for p in procs), f"the drivers exited before {what}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _refusal(stderr: str, holder: dict) -> str:
    lines = [line for line in stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, stderr[-2000:]
    line = lines[0]
    assert line.startswith("pretrain data run: error: output s3://corpus/runs/one is being")
    assert f"pid {holder['pid']} on {holder['host']}" in line and "pretrain data run" in line
    return line


def _finished_output(endpoint: str) -> dict[str, bytes]:
    stored = _objects(s3_filesystem(endpoint), f"{BUCKET}/runs/one")
    manifest = json.loads(stored["manifest.json"])
    assert set(manifest["files"]) == set(stored) - {"manifest.json"}  # no object it did not write
    return stored


def test_two_writers_on_two_machines_at_once_exactly_one_writes(tmp_path, store, reference) -> None:
    runs = {
        rows: _start(_machine(tmp_path, f"m{rows}", store), rows, tmp_path, f"m{rows}")
        for rows in (4, 6)
    }
    s3 = s3_filesystem(store)
    holder = _wait_for(lambda: _lock_record(s3), "a lock object", list(runs.values()))
    winner_rows = next(rows for rows, run in runs.items() if run.pid == holder["pid"])
    winner, loser = runs[winner_rows], runs[10 - winner_rows]
    # The holder must not finish before the other one has tried: once its job is streaming (an
    # object written; not while Ray starts, whose start-up timeouts count wall time), freeze it
    # until the other one has exited.
    _wait_for(lambda: loser.poll() is not None or _keys(s3), "either", [winner, loser])
    frozen = loser.poll() is None
    if frozen:
        os.kill(winner.pid, signal.SIGSTOP)
    try:
        _, loser_err = loser.communicate(timeout=300)
    finally:
        if frozen:
            os.kill(winner.pid, signal.SIGCONT)
    out, err = winner.communicate(timeout=600)
    assert winner.returncode == 0, err[-2000:]
    assert loser.returncode == 2, loser_err[-2000:]
    _refusal(loser_err, holder)
    assert _lock_record(s3) is None  # released on exit
    stored = _finished_output(store)
    assert _published(stored) == _expected(reference, winner_rows, tmp_path)


def test_a_killed_writers_lock_names_it_until_unlocked_then_the_rerun_is_byte_identical(
    tmp_path, store, reference, monkeypatch, capsys
) -> None:
    """The refusal, `pretrain unlock` and `pretrain verify` run in this process, "a third
    machine" (the store's settings in its environment); the two drivers each in their own."""
    from pretrain.errors import OutputLocked
    from pretrain.locking import output_lock
    from pretrain_app.cli import main

    rows = next(iter(reference), 4)  # the job whose uninterrupted run is already known, if any
    s3 = s3_filesystem(store)
    first = _start(_machine(tmp_path, "a", store), rows, tmp_path, "a")
    driver = psutil.Process(first.pid)
    procs: dict[int, psutil.Process] = {}

    def parts_written() -> bool:
        procs.update({p.pid: p for p in ray_processes(driver)})
        return bool(_keys(s3))

    _wait_for(parts_written, "a part in the store", [first])
    holder = _lock_record(s3)
    assert holder is not None and holder["pid"] == first.pid
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    wait_gone(list(procs.values()), 30.0)  # nothing of the killed job writes after this
    for name, value in s3_env(store).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(OutputLocked) as refused, output_lock(URI):
        pass
    line = str(refused.value)
    assert f"pid {holder['pid']} on {holder['host']}" in line and "no longer running" in line
    unlock = re.search(r"`pretrain (unlock \S+ --id \w+)`", line)
    assert unlock is not None and unlock.group(1).endswith(holder["id"]), line
    assert main(unlock.group(1).split()) == 0
    assert (
        f"removed the writer lock of {URI} held by pid {holder['pid']}" in capsys.readouterr().out
    )
    argv = data_run({**CONFIG, "shard_rows": rows, "output": URI}, tmp_path / "b.yaml")
    other = _machine(tmp_path, "b", store)
    rerun = subprocess.run(argv, cwd=REPO, env=other, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _published(_finished_output(store)) == _expected(reference, rows, tmp_path)
    assert main(["verify", URI]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {URI} (shards, ")
