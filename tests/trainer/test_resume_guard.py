"""Exact resume after a kill, fallback past a corrupt checkpoint, and the loss-spike guard."""

from __future__ import annotations

import json
import math

import pytest
import torch.multiprocessing as mp

from pretrain.manifest import load_manifest
from tests.trainer.faults import CRASH_EXIT_CODE, CrashAfterStep, NanLossAtStep, RecordEvents
from tests.trainer.trainer_testlib import events, losses, tiny_config
from trainer.checkpoint import list_checkpoints
from trainer.worker import spawn_ranks


@pytest.mark.timeout(300)
def test_killed_run_resumes_exactly_and_skips_a_corrupt_checkpoint(tmp_path, reference_run):
    _, expected = reference_run
    assert sorted(expected) == [1, 2, 3, 4, 5, 6]

    killed = tmp_path / "killed"
    with pytest.raises(mp.ProcessExitedException) as info:
        spawn_ranks(tiny_config(killed), 1, callbacks=[CrashAfterStep(5)])
    assert info.value.exit_code == CRASH_EXIT_CODE
    assert [step for step, _ in list_checkpoints(killed)] == [1, 2, 4]
    # the newest checkpoint (step 4) loses a byte: resume must fall back to step 2
    shard = next((killed / "checkpoints" / "iter_0000004").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-1])

    spawn_ranks(tiny_config(killed), 1)
    logged = events(killed)
    assert [e["checkpoint"] for e in logged if e["event"] == "checkpoint_skipped"] == [
        "iter_0000004"
    ]
    assert [(e["checkpoint"], e["step"]) for e in logged if e["event"] == "resume"] == [
        ("iter_0000002", 2)
    ]
    resumed = losses(killed)
    assert resumed == expected  # exactly, bit for bit, including the steps retrained after 2
    log = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("step") == 5 and "loss" in r for r in log) == 2  # killed once, then resumed


@pytest.mark.timeout(300)
def test_injected_nan_rolls_back_skips_the_batch_and_finishes(tmp_path):
    run_dir = tmp_path / "nan"
    record = tmp_path / "events.jsonl"
    spawn_ranks(tiny_config(run_dir), 1, callbacks=[NanLossAtStep(3), RecordEvents(str(record))])
    (rollback,) = [e for e in events(run_dir) if e["event"] == "rollback"]
    assert rollback["step"] == 3 and rollback["to_step"] == 2
    assert "loss is nan" in rollback["reason"]
    assert rollback["skipped_batches"] == [2]
    assert rollback["sample_ids"] == [[0, 8, 12]]  # phase 0, samples [8, 12) of the index
    per_step = losses(run_dir)
    assert sorted(per_step) == [1, 2, 3, 4, 5, 6]
    assert all(math.isfinite(v) for v in per_step.values())
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in records if "loss" in r][-4:] == [3, 4, 5, 6]  # batch 2 skipped
    manifest = load_manifest(run_dir)
    assert manifest["guard"]["rollbacks"] == 1
    assert (run_dir / "loss.png").stat().st_size > 1000
    # the named events, in order: checkpoints at the first good step and every 2; step 3's
    # NaN rolls back to step 2 without a step_end, and its replay ends normally
    step = [["step_start", n] for n in range(1, 7)]
    end = [["step_end", n] for n in range(1, 7)]
    ckpt = {n: ["checkpoint", n] for n in (1, 2, 4, 6)}
    assert [json.loads(line) for line in record.read_text().splitlines()] == [
        ["fit_start", 0],
        *(step[0], ckpt[1], end[0], step[1], ckpt[2], end[1]),
        *(step[2], ["rollback", 2], step[2], end[2]),
        *(step[3], ckpt[4], end[3], step[4], end[4], step[5], ckpt[6], end[5]),
        ["fit_end", 6],
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_guard_gives_up_after_max_rollbacks(tmp_path):
    run_dir = tmp_path / "gives-up"
    config = tiny_config(run_dir, guard={"max_rollbacks": 0})
    with pytest.raises(mp.ProcessRaisedException, match="guard.max_rollbacks = 0 exceeded"):
        spawn_ranks(config, 1, callbacks=[NanLossAtStep(2)])
