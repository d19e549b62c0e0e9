"""TP/PP on CPU with gloo: each trains with the loss going down; TP=2 equals TP=1. (DP=2:
tests/trainer/test_resume_guard.py, killed and resumed; with the distributed optimizer:
tests/trainer/test_zero.py.)"""

from __future__ import annotations

import pytest

from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config


def _train(run_dir, world: int, **parallel) -> dict[int, float]:
    config = tiny_config(run_dir, parallel={**parallel, "gpus_per_node": world})
    run_ranks(config, world, timeout_s=200)
    return losses(run_dir)


@pytest.mark.timeout(300)
def test_tensor_parallel_2_matches_tp1_and_learns(tmp_path, reference_run):
    _, tp1 = reference_run
    tp2 = _train(tmp_path / "tp2", 2, tensor=2)
    assert sorted(tp1) == list(range(1, 7))
    assert tp1[6] < tp1[1] - 0.05, tp1
    for step in tp1:
        assert tp2[step] == pytest.approx(tp1[step], rel=1e-4, abs=1e-4), (step, tp1, tp2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pipeline_parallel_2_learns(tmp_path):
    # each pipeline stage seeds its own initialisation (as Megatron does), so PP=2 starts from
    # different weights than PP=1: compare learning, not values
    pp2 = _train(tmp_path / "pp2", 2, pipeline=2)
    assert sorted(pp2) == list(range(1, 7))
    assert pp2[6] < pp2[1] - 0.05, pp2
