"""ZeRO stages in training (parallel.zero): stage 1 (megatron's distributed optimizer) trains the
same losses as stage 0 (plain megatron DDP) on 2 gloo ranks; stages 2/3 (megatron_fsdp) need CUDA
and are refused before any rank starts."""

from __future__ import annotations

import json

import pytest

from pretrain_app.cli import main
from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero_1_losses_equal_zero_0_on_two_ranks(tmp_path):
    runs = {}
    for stage in (0, 1):
        config = tiny_config(
            tmp_path / f"zero{stage}", parallel={"gpus_per_node": 2, "zero": stage}
        )
        run_ranks(config, 2, timeout_s=400)
        runs[stage] = losses(tmp_path / f"zero{stage}")
    assert sorted(runs[0]) == list(range(1, 7))
    assert runs[0][6] < runs[0][1] - 0.05, runs[0]
    for step, loss in runs[0].items():
        assert runs[1][step] == pytest.approx(loss, rel=1e-5, abs=1e-5), (step, runs)


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_2_and_3_are_refused_on_cpu_before_launch(tmp_path, capsys, stage):
    config_path = tmp_path / "train.yaml"
    config_path.write_text(json.dumps(tiny_config(tmp_path / "run")))
    code = main(["launch", str(config_path), "--set", f"parallel.zero={stage}", "--in-process"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"parallel.zero={stage} runs megatron_fsdp" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
