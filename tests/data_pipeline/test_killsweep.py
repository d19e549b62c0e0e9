"""SIGKILL the driver of `pretrain data run` (every stage on: fastText and KenLM models trained
here, perplexity and dedup included) in each phase of the job, one kill in each run of one chain
(the second resume follows a kill during the first, and so on), then let the last run finish:
the shards, rejects and ledger are byte-identical to an uninterrupted run, and each resumed run
re-did only what its predecessor left unfinished (counted: parts whose persisted map output it
reused, untouched on disk; documents its stream tagged)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.data_pipeline import killsweep as ks

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.serial]
"""A hang guard, not a time limit: six runs of the job, about 4 minutes on a quiet 2-core
machine, several times that on a loaded one."""
FIRST, SECOND = "perplexity", "dedup"
"""The global stages in registry order: the first's map side is computed in the stream."""


@pytest.fixture(scope="module")
def every_stage(tmp_path_factory, demo_models) -> dict:
    from tests.data_pipeline.test_runner_cluster_nodes import _slice
    from tests.sample_models import demo_config

    base = tmp_path_factory.mktemp("every-stage")
    raw, models = demo_models  # the session's, trained once (conftest.py)
    config = demo_config(_slice(raw, base / "in"), base / "unused", models).model_dump(mode="json")
    enabled = {name for name, section in config["stages"].items() if section is not None}
    assert {FIRST, SECOND, "domain", "quality"} <= enabled
    config.update(shard_rows=40, batch_rows=16, overwrite=False)
    config["ray"].update(num_cpus=2, timeout_s=600)
    return config


CHANGED = "bad"
"""The input edited between the last kill and the last resume (same size, mtime restored)."""


def _flip(inputs: Path) -> None:
    """One letter of the input's first document changed, its size and mtime kept."""
    path = inputs / f"{CHANGED}.jsonl"
    before, data = path.stat(), path.read_bytes()
    path.write_bytes(data.replace(b"A fine line", b"A FINE line", 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.read_bytes() != data


@pytest.fixture(scope="module")
def reference(every_stage, tmp_path_factory) -> tuple[dict[str, bytes], str]:
    """An uninterrupted run on the inputs as the last resume finds them."""
    tmp = tmp_path_factory.mktemp("reference")
    shutil.copytree(every_stage["inputs"][0], tmp / "in")
    _flip(tmp / "in")
    config = {**every_stage, "inputs": [str(tmp / "in")], "output": str(tmp / "out")}
    said = ks.finish(config, tmp, "reference")
    return ks.outputs(tmp / "out"), said


PARTS, DOCS = 9, 288
"""The slice's parts (shard_rows 40) and documents, as the reference run reads them."""


def _some_mapped(out: Path) -> bool:
    """Some parts' map output of the first global stage is persisted, not every part's."""
    return 0 < len(ks.records(out, FIRST)) < PARTS


def _merging(out: Path, since: list[float]) -> bool:
    """A shard is written, or the merge has run 0.3 s (it lasts about a second: a kill at its
    start still finds its tasks at work)."""
    since[:] = since or [time.monotonic()]
    return any((out / "data").glob("*.parquet")) or time.monotonic() - since[0] > 0.3


def _resumed(
    config: dict, tmp: Path, name: str, kill: str = "", ready=None, *, stages=(FIRST,), changed=""
) -> str:
    """Run again after a kill (killed in turn in phase `kill` when given) and check that it
    re-did only what was left: every part's persisted map output of `stages` is reused
    untouched (but the `changed` input's), and the stream tags only the other parts'
    documents. Returns what the run printed."""
    out = Path(config["output"])
    before = {stage: ks.records(out, stage) for stage in stages}
    said = ks.kill_in(config, tmp, name, kill, ready) if kill else ks.finish(config, tmp, name)
    for stage in stages:
        kept = {
            p: v for p, v in before[stage].items() if not changed or not p.startswith(f"{changed}-")
        }
        after = ks.records(out, stage)
        assert {part: after.get(part) for part in kept} == kept, stage  # reused, not rewritten
        if stage == FIRST:
            assert ks.tagged(said) == DOCS - sum(r for _, _, r in kept.values()), said[-2000:]
            if not kill:
                assert ks.reused(said, FIRST) == (len(kept), PARTS)
    return said


def test_driver_killed_in_every_phase_then_resumed_gives_the_same_bytes(
    every_stage, reference, tmp_path
) -> None:
    expected, said = reference
    assert ks.tagged(said) == DOCS and f"{PARTS} shards" in said
    shutil.copytree(every_stage["inputs"][0], tmp_path / "in")
    config = {**every_stage, "inputs": [str(tmp_path / "in")], "output": str(tmp_path / "out")}
    out = tmp_path / "out"
    # 1. mid-stream, once pieces are written: no part has its map side persisted yet
    ks.kill_in(config, tmp_path, "k1", "stream", lambda o: any(o.rglob("rows/*/*.parquet")))
    assert not ks.records(out, FIRST)
    # 2. a stage actor dies mid-write (the run goes on), then the driver, with some parts mapped
    ks.kill_in(config, tmp_path, "k2", "perplexity-map", _some_mapped, worker=ks.busy_stage_actor)
    # 3. the resume of that, killed while dedup aggregates: both global stages mapped every part
    _resumed(config, tmp_path, "k3", "dedup-aggregate")
    assert len(ks.records(out, FIRST)) == len(ks.records(out, SECOND)) == PARTS
    # 4. killed while it merges shards: neither stage maps a part again
    _resumed(
        config, tmp_path, "k4", "merge", lambda o, s=[]: _merging(o, s), stages=(FIRST, SECOND)
    )
    # 5. an input edited at the same size with its mtime restored, then the run to its end: the
    # edit is detected in one line, its part read and mapped again, none of its old tags kept
    _flip(tmp_path / "in")
    old = ks.records(out, FIRST)[f"{CHANGED}-00000"]
    said = _resumed(config, tmp_path, "final", changed=CHANGED)
    warned = [line for line in said.splitlines() if "changed since the last run" in line]
    assert len(warned) == 1 and warned[0].endswith(f"recomputed: {CHANGED}"), said[-2000:]
    assert ks.records(out, FIRST)[f"{CHANGED}-00000"][:2] != old[:2]
    assert ks.outputs(out) == expected
