"""Exact resume after a kill, fallback past a corrupt checkpoint, and the loss-spike guard."""

from __future__ import annotations

import json
import math

import pytest

from pretrain.manifest import load_manifest
from tests.trainer.faults import CRASH_EXIT_CODE
from tests.trainer.trainer_testlib import RanksFailed, events, losses, run_ranks, tiny_config
from trainer.checkpoint import list_checkpoints


@pytest.mark.timeout(300)
def test_killed_data_parallel_run_resumes_exactly_and_skips_a_corrupt_checkpoint(
    tmp_path, reference_run
):
    """Two ranks under torchrun (data parallel), killed after step 5: the
    resume falls back past a damaged newest checkpoint, retrains steps 3-5 bit for bit as the
    killed run trained them, and the whole run equals one rank's up to reduction order."""
    _, one_rank = reference_run
    assert sorted(one_rank) == [1, 2, 3, 4, 5, 6]
    assert one_rank[6] < one_rank[1] - 0.05, one_rank  # it learns
    killed = tmp_path / "killed"
    config = tiny_config(killed, parallel={"gpus_per_node": 2})
    with pytest.raises(RanksFailed) as info:
        run_ranks(config, 2, callbacks={"CrashAfterStep": [5]})
    assert CRASH_EXIT_CODE in info.value.exit_codes
    assert [step for step, _ in list_checkpoints(killed)] == [1, 2, 4]
    first = losses(killed)
    assert sorted(first) == [1, 2, 3, 4, 5]
    # the newest checkpoint (step 4) loses a byte: resume must fall back to step 2
    shard = sorted((killed / "checkpoints" / "iter_0000004").glob("*.distcp"))[-1]
    shard.write_bytes(shard.read_bytes()[:-1])

    run_ranks(config, 2)
    logged = events(killed)
    assert [e["checkpoint"] for e in logged if e["event"] == "checkpoint_skipped"] == [
        "iter_0000004"
    ]
    assert [(e["checkpoint"], e["step"]) for e in logged if e["event"] == "resume"] == [
        ("iter_0000002", 2)
    ]
    resumed = losses(killed)
    assert {step: resumed[step] for step in first} == first  # steps 3-5 again, bit for bit
    for step in one_rank:  # same global batch over two ranks: same math up to reduction order
        assert resumed[step] == pytest.approx(one_rank[step], rel=1e-4, abs=1e-4), step
    log = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("step") == 5 and "loss" in r for r in log) == 2  # killed once, then resumed


@pytest.mark.timeout(300)
def test_injected_nan_rolls_back_skips_the_batch_and_finishes(tmp_path):
    run_dir = tmp_path / "nan"
    record = tmp_path / "events.jsonl"
    run_ranks(tiny_config(run_dir), 1, {"NanLossAtStep": [3], "RecordEvents": [str(record)]})
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
    with pytest.raises(RanksFailed, match="guard.max_rollbacks = 0 exceeded"):
        run_ranks(config, 1, callbacks={"NanLossAtStep": [2]})


def _exact_mixture(tmp_path, batches: int):
    """A mixture of exactly `batches` global batches of 16 x 64 tokens (as a proxy's is)."""
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config
    from tests.mixtures.conftest import make_encoded, mixture_config

    encoded = make_encoded(tmp_path / "enc")
    data = mixture_config(encoded, tmp_path / "mix", total_tokens=batches * 16 * 64)
    data["recipe"]["phases"] = [{"name": "main", "share": 1.0, "seq_length": 64}]
    build_mixture(parse_config(MixtureConfig, data))
    return tmp_path / "mix"


@pytest.mark.timeout(300)
def test_a_rollback_to_an_early_checkpoint_that_runs_out_of_data_saves_its_last_step(tmp_path):
    """The sweep's failure: a NaN rolls back to the only checkpoint (step 1), the skipped batches
    leave too few for the planned steps, the data runs out. The last trained step is saved
    (before, only step 1 was: `eval run` scored it as the run's result) and summary.json says
    how the run ended, what it trained and skipped."""
    run_dir = tmp_path / "short"
    config = tiny_config(
        run_dir,
        run={"train_steps": 8},
        model={"vocab_size": 60001, "seq_length": 64},
        batch={"micro_batch_size": 8, "global_batch_size": 16},
        data={"source": "mixture", "mixture_dir": str(_exact_mixture(tmp_path, 8))},
        checkpoint={"every": 8, "keep_last": 1},
        guard={"skip_batches": 2},
    )
    run_ranks(config, 1, callbacks={"NanLossAtStep": [3]})
    (rollback,) = [e for e in events(run_dir) if e["event"] == "rollback"]
    assert rollback["to_step"] == 1 and rollback["skipped_batches"] == [2, 3]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == "data exhausted"
    assert (summary["steps"], summary["total_steps"]) == (6, 8)
    assert summary["skipped_batches"] == [2, 3] and summary["rollbacks"] == 1
    assert [step for step, _ in list_checkpoints(run_dir)] == [6]
    assert summary["tokens_seen"] == 6 * 16 * 64
