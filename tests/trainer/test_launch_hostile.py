"""Hostile checkpoints in an existing run, resumed by the real CLI (`pretrain launch
--in-process`, clean env, gloo, the tiny model): a byte flipped at the same size, a truncated
shard and Megatron-LM's latest_checkpointed_iteration.txt naming another iteration resume from the
last good checkpoint and say which (bit-exact losses); every checkpoint corrupt is refused in one
line naming the folder and what to do, the run left byte for byte as it was (before: the run
trained again from step 0, appended to metrics.jsonl and replaced the damaged checkpoints). A
preflight refusal leaves no log in RUN/.logs/ (before: moved there). A checkpoint of another model
is refused by tests/trainer/test_resume_identity.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_env
from tests.trainer.test_launch_out import _snapshot
from tests.trainer.trainer_testlib import events, losses, tiny_config
from trainer.checkpoint import checkpoint_dir

REPO = Path(__file__).resolve().parents[2]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _shard(run: Path, step: int) -> Path:
    return next(checkpoint_dir(run, step).glob("*.distcp"))


def _launch(tmp_path: Path, run_dir: Path, **sections: dict) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config(run_dir, **sections)))
    env = {**clean_env(), "PYTHONPATH": str(REPO), "PRETRAIN_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "pretrain_app", "launch", str(config), "--nproc", "1"]
    return subprocess.run(
        [*argv, "--in-process"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400
    )


@pytest.mark.timeout(600)
def test_damaged_checkpoints_resume_from_the_last_good_one_and_say_so(
    tmp_path, reference_copy, reference_run
):
    run = reference_copy
    _flip(_shard(run, 6))  # a byte flipped, the size kept
    shard = _shard(run, 4)
    shard.write_bytes(shard.read_bytes()[:-9])  # a truncated shard
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("6")  # Megatron-LM's
    proc = _launch(tmp_path, run)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr
    out = proc.stdout
    assert "iter_0000006 is corrupt, skipped" in out and "__0_0.distcp does not match" in out
    assert "iter_0000004 is corrupt, skipped" in out
    assert "latest_checkpointed_iteration.txt, which a resume does not read" in out
    assert "[train] resumed from iter_0000002 (step 2)" in out
    skipped = [e["checkpoint"] for e in events(run) if e["event"] == "checkpoint_skipped"]
    assert skipped == ["iter_0000006", "iter_0000004"]
    assert [e["step"] for e in events(run) if e["event"] == "resume"] == [2]
    assert losses(run) == reference_run[1]  # steps 3-6 retrained, bit for bit


@pytest.mark.timeout(600)
def test_every_checkpoint_corrupt_is_refused_and_the_run_left_as_it_was(tmp_path, reference_copy):
    run = reference_copy
    for step in (2, 4, 6):
        _flip(_shard(run, step))
    before = _snapshot(run)
    for sections in ({}, {"run": {"train_steps": 8}}):
        proc = _launch(tmp_path, run, **sections)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (proc.stdout[-2000:], lines)
        line = lines[0]
        assert line.startswith("pretrain launch: error: resume refused: none of the 3 checkpoint")
        assert f"{run / 'checkpoints'} verifies" in line and "iter_0000006" in line, line
        assert "aside to train this run again from step 0" in line, line
        assert _snapshot(run) == before  # no step 0 retrained, no metrics, no .logs/


@pytest.mark.timeout(600)
def test_a_preflight_refusal_leaves_the_run_folder_as_it_was(tmp_path, reference_copy):
    """Another model's config against this run's checkpoints: refused by the preflight, whose log
    (megatron's warnings) stays in the temp dir instead of RUN/.logs/."""
    run = reference_copy
    before = _snapshot(run)
    proc = _launch(tmp_path, run, run={"train_steps": 8}, model={"hidden_size": 128})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.stdout[-2000:], lines)
    assert "resume refused: checkpoint" in lines[0] and "iter_0000006" in lines[0], lines
    assert _snapshot(run) == before


@pytest.mark.timeout(600)
def test_a_rank_refuses_a_run_whose_every_checkpoint_is_corrupt(tmp_path, reference_copy):
    """A rank started without the launcher (trainer.worker.run) refuses it too."""
    from tests.trainer.trainer_testlib import RanksFailed, run_ranks

    run = reference_copy
    for step in (2, 4, 6):
        _flip(_shard(run, step))
    before = _snapshot(run)
    with pytest.raises(RanksFailed) as info:
        run_ranks(tiny_config(run, run={"train_steps": 8}), 1)
    assert "pretrain launch: error: resume refused: none of the 3 checkpoint(s)" in str(info.value)
    after = _snapshot(run)
    assert {k: v for k, v in after.items() if k != "metrics.jsonl"} == {
        k: v for k, v in before.items() if k != "metrics.jsonl"
    }  # rank 0 logs the skipped checkpoints in metrics.jsonl, nothing else is written
    assert after["metrics.jsonl"].startswith(before["metrics.jsonl"])
