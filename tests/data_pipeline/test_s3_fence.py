"""Every write and delete a data job's Ray workers make under an `s3://` output is fenced by the
writer lock's id carried in the task's own arguments (the `ObjectPath`s the driver hands them),
not by the environment: so it holds for a driver that joined a Ray already initialised in its
process (a notebook or a library caller that ran `ray.init()` first), whose workers were started
before the driver took its lock and never see `PRETRAIN_WRITER_LOCK`.

One driver process (clean environment) starts a local Ray first, then runs the data job's own
launchers (pretrain's code: ray_job.build_stream, global_parts.run_global_stages with the dedup
stage's file exchange, ray_job.build_merge) against a real S3-compatible server (moto, one
request at a time), phase by phase. Before each phase is let through, it runs once under a lock
that was taken away from it (the driver's heartbeat stopped, the lock object replaced by another
holder's, as `pretrain unlock` and a second writer would): each phase's first worker write must
be refused ("stopped writing ... from a worker") and the output's objects stay exactly as they
were. Each phase then runs under a fresh lock of its own, so no worker answers from a check it
cached under an earlier lock: a worker that reads its lock before writing finds it taken.

Fails on the old code (tasks handed `str(out)`; the workers, started before the lock, have no id
to check): every refused phase wrote its objects. Fails too with outstore's fence removed. A
refusal reaches the driver as the worker's one line (the merge's went through Ray Data's
wrapping as a multi-line RayTaskError before execute.pretrain_cause).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.data_pipeline.raytools import DATA, REPO, clean_env
from tests.data_pipeline.s3tools import moto_server, s3_env, s3_filesystem

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BUCKET = "fenced"
URI = f"s3://{BUCKET}/runs/one"
DRIVER = r"""
import json, os, sys, time
import ray
from data_pipeline import execute, global_parts, ray_job, resume, runner
from data_pipeline.config import PipelineConfig
from pretrain import lockobject, objectlock, rayinit
from pretrain.errors import OutputLocked
from pretrain.locking import output_lock
from pretrain.outstore import output_path

uri, source = sys.argv[1], sys.argv[2]
rayinit.connect(None, num_cpus=2)  # Ray first: its workers inherit no writer lock


@ray.remote
def lock_env():
    return os.environ.get(objectlock.FENCE_ENV)


report = {"worker_env": ray.get(lock_env.remote()), "phases": []}
config = PipelineConfig.model_validate(
    {
        "inputs": [source],
        "output": uri,
        "shard_rows": 7,
        "batch_rows": 7,
        "stages": {"extract": {}, "dedup": {}},
        "ray": {"num_cpus": 2, "workers": 1, "timeout_s": 120},
    }
)
stages, inputs = runner.preflight(config, [])
out = output_path(config.output)
work, done = resume.plan_work(config, stages, inputs, out)
target = lockobject.target_of(uri)
client = lockobject.client_for(target)


def keys():
    listed = client.list_objects_v2(Bucket=target.bucket, Prefix="runs/one/")
    return {o["Key"]: o["ETag"] for o in listed.get("Contents", [])}


def stream():
    execute.run(ray_job.build_stream(config, stages, work.read, out, work.skip), 120)


def global_stages():
    rows = global_parts.expected_rows(out, work.merge, config.shard_rows)
    global_parts.run_global_stages(out, stages, rows, 120)


def merge():
    execute.run(ray_job.build_merge(config, stages, out, work.merge, done), 120)


def taken_away(name, phase):
    before = keys()
    with output_lock(uri):
        lock = objectlock._held[uri]
        lock._stop.set()  # its heartbeat stops, as a frozen driver's; its last renewal is fresh
        lock._thread.join(30)
        other = {**lock.record, "id": "0" * 16, "host": "another-machine", "pid": 1}
        client.put_object(Bucket=target.bucket, Key=target.key, Body=json.dumps(other).encode())
        try:
            phase()
            refusal = None
        except Exception as exc:
            refusal = f"{type(exc).__name__}: {exc}"
    client.delete_object(Bucket=target.bucket, Key=target.key)
    after = keys()
    report["phases"].append(
        {
            "phase": name,
            "refusal": refusal,
            "added_or_changed": sorted(k for k in after if before.get(k) != after[k]),
            "removed": sorted(set(before) - set(after)),
        }
    )


for name, phase in (
    ("stream", stream),  # read tasks: read records, costs; map actors: setup costs, pieces
    ("global-map", global_stages),  # map tasks: persisted map side, part records, removals
    ("exchange", global_stages),  # map reused: the dedup aggregate's piece files
    ("merge", merge),  # shards, rejects, ledger fragments, part costs, removals
):
    taken_away(name, phase)
    if name in ("stream", "global-map"):  # what the next phase reads (exchange: joins ran)
        with output_lock(uri):
            phase()
print(json.dumps(report))
ray.shutdown()
"""


@pytest.fixture
def store() -> Iterator[str]:
    with moto_server(serial=True) as endpoint:
        s3_filesystem(endpoint).create_dir(BUCKET)
        yield endpoint


def test_workers_of_a_driver_that_joined_a_running_ray_are_fenced(tmp_path, store) -> None:
    env = clean_env(tmp_path / "home", **s3_env(store), PRETRAIN_LOCK_LEASE_S="300")
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, URI, str(DATA / "docs.jsonl")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=270,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["worker_env"] is None  # the workers cannot know the lock but from their args
    phases = report["phases"]
    assert [p["phase"] for p in phases] == ["stream", "global-map", "exchange", "merge"]
    unfenced = [p for p in phases if p["added_or_changed"] or p["removed"]]
    assert unfenced == []  # not one object written or deleted after the lock was taken
    for phase in phases:
        refusal = phase["refusal"] or ""  # a worker's refusal, as Ray hands it over
        assert f"OutputLocked: stopped writing {URI} from a worker" in refusal, phase
        assert "is now held by pid 1 on another-machine" in refusal, phase
        if phase["phase"] != "stream":  # there a map actor may die first: Ray keeps its text
            assert refusal.startswith("OutputLocked: ") and "\n" not in refusal, phase
