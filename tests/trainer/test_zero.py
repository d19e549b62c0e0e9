"""ZeRO stages in training (parallel.zero): stage 1 (megatron's distributed optimizer) on 2 gloo
ranks trains the losses of one rank, as stage 0 (plain megatron DDP) does, and killed and resumed
trains bit for bit as uninterrupted; stages 2/3 (megatron_fsdp) need CUDA and are refused before
any rank starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pretrain.safeload import guard_torch_loading, torch_load
from pretrain_app.cli import main
from tests.trainer.faults import CRASH_EXIT_CODE
from tests.trainer.trainer_testlib import RanksFailed, events, losses, run_ranks, tiny_config
from trainer.checkpoint import checkpoint_dir, list_checkpoints

ZERO_1 = {"gpus_per_node": 2, "zero": 1}


@pytest.fixture(scope="module")
def zero_1_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny config trained 6 steps, uninterrupted, on 2 ranks with parallel.zero=1."""
    run_dir = tmp_path_factory.mktemp("zero1") / "run"
    run_ranks(tiny_config(run_dir, parallel=ZERO_1), 2, timeout_s=400)
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero_1_losses_equal_one_ranks(zero_1_run, reference_run):
    """The distributed optimizer trains the math of one rank (the same global batch), as plain
    data parallel does (tests/trainer/test_resume_guard.py: 2 ranks of stage 0 against the same
    reference, the same tolerance for the reduction order)."""
    _, one_rank = reference_run
    zero_1 = losses(zero_1_run)
    assert sorted(zero_1) == sorted(one_rank) == list(range(1, 7))
    assert zero_1[6] < zero_1[1] - 0.05, zero_1
    for step, loss in one_rank.items():
        assert zero_1[step] == pytest.approx(loss, rel=1e-4, abs=1e-4), (step, zero_1, one_rank)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero_1_killed_and_resumed_trains_bit_for_bit_as_uninterrupted(tmp_path, zero_1_run):
    """Killed after step 3, resumed from its step-2 checkpoint (a fresh distributed optimizer,
    whose Adam has no state until it loads one), saving again at 4 and 6: the same losses and
    the same step-6 checkpoint (weights, Adam moments and step) as the uninterrupted run."""
    killed = tmp_path / "killed"
    config = tiny_config(killed, parallel=ZERO_1)
    with pytest.raises(RanksFailed) as info:
        run_ranks(config, 2, callbacks={"CrashAfterStep": [3]}, timeout_s=400)
    assert CRASH_EXIT_CODE in info.value.exit_codes
    assert [step for step, _ in list_checkpoints(killed)] == [1, 2]

    run_ranks(config, 2, timeout_s=400)
    resumes = [(e["checkpoint"], e["step"]) for e in events(killed) if e["event"] == "resume"]
    assert resumes == [("iter_0000002", 2)]
    assert losses(killed) == losses(zero_1_run)
    resumed = _tensors(checkpoint_dir(killed, 6), tmp_path / "resumed.pt")
    uninterrupted = _tensors(checkpoint_dir(zero_1_run, 6), tmp_path / "uninterrupted.pt")
    assert sorted(resumed) == sorted(uninterrupted)
    for key, value in uninterrupted.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(resumed[key], value), key
        else:  # the optimizer's param groups: lr and Adam's step (6.0)
            assert resumed[key] == value, key


def _tensors(checkpoint: Path, whole: Path) -> dict[str, Any]:
    """Every entry of a dist_checkpointing checkpoint by key (copied whole into `whole` by
    torch's converter, which needs no process group)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    guard_torch_loading()
    dcp_to_torch_save(str(checkpoint), str(whole))
    loaded: dict[str, Any] = torch_load(whole)
    return loaded


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_2_and_3_are_refused_on_cpu_before_launch(tmp_path, capsys, stage):
    config_path = tmp_path / "train.yaml"
    config_path.write_text(json.dumps(tiny_config(tmp_path / "run")))
    code = main(["launch", str(config_path), "--set", f"parallel.zero={stage}", "--in-process"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"parallel.zero={stage} runs megatron_fsdp" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
