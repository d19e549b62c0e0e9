"""A resume whose config changes which samples the saved batch index points at (the global
batch, the synthetic data's seed, corpus or phase layout) is refused in one line naming the
settings, by the launcher before any rank starts and by the ranks before the load; settings that
only change training from here on (more steps on one phase, logging, the learning rate,
checkpoint cadence) stay allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pretrain_app.cli import main
from tests.trainer.trainer_testlib import RanksFailed, checkpoint_hashes, run_ranks, tiny_config
from trainer.config import TrainConfig
from trainer.data import resume_order_changes

REORDERING = {
    "batch.global_batch_size": {"batch": {"global_batch_size": 8}},
    "run.seed": {"run": {"seed": 8}},
    "data.synthetic_documents": {"data": {"synthetic_documents": 65}},
}


def _launch(tmp_path: Path, config: dict, *extra: str) -> int:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return main(["launch", str(path), "--nproc", "1", *extra])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("field", sorted(REORDERING))
def test_launch_refuses_a_resume_that_reorders_the_batches(tmp_path, capsys, reference_copy, field):
    run_dir, before = reference_copy, checkpoint_hashes(reference_copy)
    config = tiny_config(run_dir, **{"run": {"train_steps": 8}})
    for section, values in REORDERING[field].items():
        config[section] = {**config[section], **values}
    for extra in (["--dry-run"], []):
        capsys.readouterr()
        assert _launch(tmp_path, config, *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pretrain launch: error: resume refused"), err
        assert field in err[0] and "iter_0000006" in err[0] and "run.out_dir" in err[0], err
    assert checkpoint_hashes(run_dir) == before


@pytest.mark.timeout(300)
def test_training_only_settings_may_change_on_resume(tmp_path, capsys, reference_copy):
    run_dir = reference_copy
    changed = {
        "run": {"train_steps": 10, "log_every": 2},
        "optim": {"lr": 1e-3},
        "checkpoint": {"every": 5, "keep_last": 4},
        "batch": {"micro_batch_size": 1},
    }
    assert _launch(tmp_path, tiny_config(run_dir, **changed), "--dry-run") == 0
    assert "# preflight: ok" in capsys.readouterr().out


def test_two_phase_synthetic_layout_moves_with_the_step_count():
    """With two synthetic phases, more steps move the phase boundary: batch 3 would then come
    from the other phase's windows. One phase may be extended freely."""
    two = {"phases": [{"name": "a", "seq_length": 32}, {"name": "b", "seq_length": 64}]}
    old = TrainConfig.model_validate(tiny_config(Path("r"), data=two))
    new = TrainConfig.model_validate(tiny_config(Path("r"), data=two, run={"train_steps": 20}))
    recorded = old.model_dump(mode="json")
    assert resume_order_changes(new, recorded)[0].startswith("run.train_steps")
    one_old = TrainConfig.model_validate(tiny_config(Path("r")))
    one_new = TrainConfig.model_validate(tiny_config(Path("r"), run={"train_steps": 20}))
    assert resume_order_changes(one_new, one_old.model_dump(mode="json")) == []


@pytest.mark.timeout(300)
def test_a_rank_refuses_a_reordering_resume_before_loading(tmp_path, reference_copy):
    run_dir, before = reference_copy, checkpoint_hashes(reference_copy)
    config = tiny_config(run_dir, run={"train_steps": 8}, batch={"global_batch_size": 8})
    with pytest.raises(RanksFailed) as info:
        run_ranks(config, 1)
    message = str(info.value)
    assert (
        "pretrain launch: error: resume refused" in message and "batch.global_batch_size" in message
    )
    assert checkpoint_hashes(run_dir) == before
