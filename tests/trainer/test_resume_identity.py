"""A resume into a run directory whose checkpoints hold another model is refused in one line,
by the launcher before any rank starts and by the ranks themselves, never by a megatron shape
error deep in the checkpoint load; the checkpoints are left as they were."""

from __future__ import annotations

import pytest
import yaml

from pretrain_app.cli import main
from tests.trainer.trainer_testlib import RanksFailed, checkpoint_hashes, run_ranks, tiny_config

OTHER_MODELS = {
    "hidden size": {"model": {"hidden_size": 128}},
    "vocabulary": {"data": {"synthetic_vocab": 256}},
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("change", sorted(OTHER_MODELS))
def test_launch_refuses_to_resume_another_models_checkpoint(
    tmp_path, capsys, reference_copy, change
):
    run_dir, before = reference_copy, checkpoint_hashes(reference_copy)
    sections = {"run": {"train_steps": 8}, **OTHER_MODELS[change]}
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config(run_dir, **sections)))
    for extra in (["--dry-run"], []):
        capsys.readouterr()
        assert main(["launch", str(config), "--nproc", "1", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pretrain launch: error: resume refused"), err
        assert "iter_0000006" in err[0] and "run.out_dir" in err[0]
    assert checkpoint_hashes(run_dir) == before
    assert not (run_dir / "checkpoints" / "iter_0000008").exists()
    same = tmp_path / "same.yaml"  # the config it was trained with still passes the preflight
    same.write_text(yaml.safe_dump(tiny_config(run_dir, run={"train_steps": 8})))
    assert main(["launch", str(same), "--nproc", "1", "--dry-run"]) == 0
    assert "# preflight: ok" in capsys.readouterr().out


@pytest.mark.timeout(300)
def test_a_rank_refuses_another_models_checkpoint_before_loading_it(tmp_path, reference_copy):
    run_dir, before = reference_copy, checkpoint_hashes(reference_copy)
    config = tiny_config(run_dir, run={"train_steps": 8}, model={"hidden_size": 128})
    with pytest.raises(RanksFailed) as info:
        run_ranks(config, 1)
    message = str(info.value)
    assert "pretrain launch: error: resume refused: checkpoint" in message, message[-2000:]
    assert "CheckpointingException" not in message
    assert checkpoint_hashes(run_dir) == before
