"""A Ray cluster on loopback (a `ray start --head` node and two nodes that join it with `ray start
--address`, each with its own temp dir and CPUs), driven by `pretrain data run --ray-address` from
a fresh shell with every stage enabled (fastText and KenLM models trained here, dedup and
perplexity included):

- with a node's raylet (and its busy workers) SIGKILLed in each phase of the job - while its stage
  actors tag rows, while its tasks join perplexity and persist the dedup map side, during the
  dedup aggregate, while it merges shards - the job still finishes with the embedded local run's
  shards, rejects and ledger byte for byte, and the tag progress ends on the documents read, each
  counted once. Each run loses both joined nodes, one in an early phase and one in a later phase
  (two runs cover the four phases; a run with no node lost is not run apart: each run is a
  three-node run up to its first kill). The driver finds the cluster's token in its own shell
  (~/.ray/auth_token, no RAY_* variable set);
- another machine's shell, without the token, is refused in one line that says what to set.
  Ray Data retries the lost tasks and restarts the lost actors; the global stages' tasks retry
  (max_retries) and lost objects are rebuilt from lineage; a task re-run after it finished its
  writes finds them (a merge: its shard's record; a map: its persisted part).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import shutil
import signal
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tests.data_pipeline.raytools import (
    REPO,
    HeadExited,
    alive,
    clean_env,
    data_run,
    free_port,
    outputs,
    ray_processes,
    run_cli,
    start_node,
    stop_node,
    token_home,
    wait_for_head,
    wait_for_nodes,
)

pytestmark = pytest.mark.serial

HANG_S = 1800
"""A hang guard, not a time limit: the module's fixtures (models trained, the embedded run) run
inside the first test's time, and a loaded 2-core machine runs all of it several times slower."""


@pytest.fixture(scope="module")
def every_stage(tmp_path_factory, demo_models) -> dict:
    """A config enabling every stage, with fastText and KenLM models trained on the whole sample
    once per session (conftest.py's `demo_models`)."""
    from tests.sample_models import demo_config

    base = tmp_path_factory.mktemp("every-stage")
    raw, models = demo_models
    config = demo_config(_slice(raw, base / "in"), base / "unused", models).model_dump(mode="json")
    enabled = {k for k, v in config["stages"].items() if v is not None}
    assert {"dedup", "perplexity", "domain", "quality"} <= enabled
    config.update(shard_rows=40, batch_rows=16, ray={"timeout_s": 1200, "num_cpus": 2})
    # More reduce tasks than the plan picks for a few hundred documents (one per CPU): the dedup
    # aggregate then lasts long enough for the kill test to find the node in it. Partitions
    # change the plan, never the output.
    config["stages"]["dedup"]["num_partitions"] = 24
    return config


def _slice(raw: Path, out: Path) -> Path:
    """A few hundred documents of every kind in the sample (a loaded 2-core machine runs the job
    three times): the first WARC records (one gzip member each), JSON lines and Parquet rows."""
    out.mkdir()
    data, pos = (raw / "web.warc.gz").read_bytes(), 0
    for _ in range(60):
        member = zlib.decompressobj(31)
        member.decompress(data[pos:])
        pos = len(data) - len(member.unused_data)
    (out / "web.warc.gz").write_bytes(data[:pos])
    with gzip.open(raw / "prose.jsonl.gz", "rb") as lines:
        prose = b"".join(line for _, line in zip(range(160), lines, strict=False))
    (out / "prose.jsonl.gz").write_bytes(gzip.compress(prose, mtime=0))
    pq.write_table(pq.read_table(raw / "code.parquet").slice(0, 60), out / "code.parquet")
    shutil.copyfile(raw / "bad.jsonl", out / "bad.jsonl")
    return out


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return token_home(tmp_path_factory.mktemp("cluster-home") / "home")


@pytest.fixture(scope="module")
def embedded(every_stage, tmp_path_factory, home) -> dict[str, bytes]:
    base = tmp_path_factory.mktemp("embedded")
    run = run_cli(
        data_run({**every_stage, "output": str(base / "out")}, base / "p.yaml"), clean_env(home)
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return outputs(base / "out")


@contextlib.contextmanager
def three_nodes(env: dict[str, str]) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """A head with 1 CPU and two nodes with 2 each joined to it; yields (address, the two).
    On a loaded machine `ray start` can end a node whose raylet registered late: such a cluster
    is started again (3 tries); a node that dies later fails the test."""
    for attempt in range(1, 4):
        port = free_port()
        root = Path("/tmp") / f"rn-{port}"  # short: Ray's socket paths live under the temp dirs
        head, nodes = start_node(root / "head", env, 1, port=port), []
        try:
            address = f"127.0.0.1:{port}"
            wait_for_head(address, head)
            # A joining node sends the token only with RAY_AUTH_MODE=token (the head turns it
            # on by itself once a token exists): what the README tells a user to set there.
            node_env = {**env, "RAY_AUTH_MODE": "token"}
            for name in ("a", "b"):
                nodes.append(start_node(root / name, node_env, 2, head_address=address))
            wait_for_nodes(head, *nodes)
            break
        except HeadExited:
            _stop(head, nodes, root)
            if attempt == 3:
                raise
    try:
        yield address, nodes
    finally:
        _stop(head, nodes, root)


def _stop(head: subprocess.Popen[bytes], nodes: list[subprocess.Popen[bytes]], root: Path) -> None:
    for node in nodes:
        stop_node(node)
    stop_node(head)
    shutil.rmtree(root, ignore_errors=True)


KILL_PHASES = (("stream", "dedup-aggregate"), ("perplexity-join", "merge"))
"""Where the first and then the second joined node dies (the driver's phase,
`.parts/progress/phase.json`): while its stage actors tag rows; while its tasks join the first
global stage (perplexity) and compute and persist the dedup map side (signatures, band keys);
while its tasks run the dedup aggregate (buckets, candidate verification, components); while its
tasks merge pieces into shards."""


@pytest.mark.slow
@pytest.mark.timeout(HANG_S)
@pytest.mark.parametrize("phases", KILL_PHASES, ids="+".join)
def test_nodes_killed_mid_run_still_give_the_same_bytes(
    phases, tmp_path, home, every_stage, embedded
) -> None:
    env = clean_env(home, PRETRAIN_PROGRESS_S="0.5")
    out = tmp_path / "out"
    log = tmp_path / "run.log"  # a file, not a pipe nobody reads while the test waits
    with three_nodes(env) as (address, nodes), log.open("w") as sink:
        argv = data_run({**every_stage, "output": str(out)}, tmp_path / "p.yaml")
        run = subprocess.Popen(
            [*argv, "--ray-address", address], cwd=REPO, env=env, stdout=sink, stderr=sink
        )
        killed = [
            _kill_raylet_in(phase, psutil.Process(node.pid), out, run)
            for phase, node in zip(phases, nodes, strict=True)
        ]
        run.wait(timeout=1500)
        if phases == KILL_PHASES[0]:  # one cluster suffices: the head's refusal, no node needed
            argv = data_run({**every_stage, "output": str(tmp_path / "x")}, tmp_path / "x.yaml")
            refused = run_cli([*argv, "--ray-address", address], clean_env(tmp_path / "other"))
            error = [line for line in refused.stderr.splitlines() if "error:" in line]
            assert refused.returncode == 2, refused.stderr[-2000:]
            assert len(error) == 1 and "RAY_AUTH_MODE=token" in error[0], refused.stderr[-2000:]
            assert "auth_token" in error[0] and "Traceback" not in refused.stderr
    assert all(killed), killed
    assert run.returncode == 0, log.read_text()[-3000:]
    assert outputs(out) == embedded
    # the tag progress counts each row once, whichever worker (dead or restarted) tagged it
    counts = _tag_counts(log.read_text())
    assert counts and counts[-1][0] == counts[-1][1], counts
    assert all(done <= total for done, total in counts), counts


def _kill_raylet_in(phase: str, node: psutil.Process, out: Path, run: subprocess.Popen) -> str:
    """SIGKILL the node's raylet, then its workers busy with a task, once the driver is in
    `phase` and a worker on the node works in it (its process title names what it runs: a stage
    actor's call in the stream, a task later). Returns those titles; raises if the job ended
    first, naming the phases seen and what the node ran (for a failure that cannot be re-run)."""
    marker = out / ".parts" / "progress" / "phase.json"
    entered, seen, titles = None, list[str](), set[str]()
    while run.poll() is None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            now = json.loads(marker.read_text())["phase"]
            if not seen or seen[-1] != now:
                seen.append(now)
            if now == phase:
                entered = entered or time.monotonic()
                procs = alive(ray_processes(node))
                titles |= {_title(p) for p in procs}
                working = [p for p in procs if _works_in(phase, _title(p))]
                raylets = [p for p in procs if _title(p) == "raylet"]
                # A short phase (a few tasks of a few hundred documents: the merge lasts about
                # a second) can end between two looks; after 50 ms in it without seeing a busy
                # worker, the node dies anyway with every worker it has (what it holds and runs
                # is lost all the same).
                late = phase != "stream" and time.monotonic() - entered > 0.05
                if late and not working:
                    working = [p for p in procs if _title(p).startswith("ray::")]
                if raylets and (working or late):
                    # the titles first: a killed process has none
                    victims = ", ".join(sorted({_title(p) for p in [*raylets, *working]}))
                    for proc in [*raylets, *working]:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            proc.send_signal(signal.SIGKILL)
                    return victims
        time.sleep(0.05 if entered is None else 0.01)
    raise AssertionError(
        f"the second node never worked in phase {phase} before the job ended "
        f"(phases seen: {seen}; the node's processes in it: {sorted(titles)})"
    )


def _works_in(phase: str, title: str) -> bool:
    if not title.startswith("ray::") or title in IDLE:
        return False
    if phase == "stream":  # `ray::MapWorker(MapBatches(MapStagesWorker)).<method>` in a call
        return "MapStagesWorker))." in title
    return True


IDLE = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _title(proc: psutil.Process) -> str:
    """The process title Ray sets (`ray::<task>` while a worker runs one), "" once it is gone."""
    try:
        return "raylet" if proc.name() == "raylet" else (proc.cmdline() or [""])[0]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


def _tag_counts(log: str) -> list[tuple[int, int]]:
    """(done, total) of every `[data run: tag] done/total docs` progress line."""
    found = re.finditer(r"^\[data run: tag\] (\d+)/(\d+) docs", log, re.MULTILINE)
    return [(int(m[1]), int(m[2])) for m in found]
