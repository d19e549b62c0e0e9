"""Every way a run starts keeps a second writer out of its run directory, not only `pretrain
launch`: ranks torchrun starts without a launcher holding the lock (what tests do), a rank
started by hand (`python -m trainer.worker CONFIG`), and one that claims a launcher holds the
lock when none does. Before, only the launcher (and rank 0 of an elastic launch) took
the lock: any of these trained into a run another launch was training (two writers of one
metrics.jsonl and one checkpoints/). A rank whose launcher holds the lock (RUN_LOCKED_BY, set by
`pretrain launch` for torchrun's ranks) still trains: every torchrun launch test shows it
(tests/trainer/test_launch_concurrent.py: exactly one of two launches trains)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pretrain.config import config_dict, parse_config
from pretrain_app.cli import main
from tests.trainer.test_elastic_lock import _held, _worker
from tests.trainer.trainer_testlib import RanksFailed, run_ranks, tiny_config
from trainer.config import TrainConfig
from trainer.worker import RUN_LOCKED_BY


def _config_json(tmp_path: Path, run_dir: Path) -> Path:
    config = parse_config(TrainConfig, tiny_config(run_dir))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_dict(config)))
    return path


def _untouched(run_dir: Path) -> None:
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "metrics.jsonl").exists()
    assert not (run_dir / "launch" / "error.txt").exists()  # not the holder's launcher's to read


@pytest.mark.timeout(180)
def test_ranks_started_into_a_held_run_are_refused_naming_the_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with _held(run_dir) as pid, pytest.raises(RanksFailed) as refused:
        run_ranks(tiny_config(run_dir), 1, timeout_s=150, how="torchrun")  # old code: trained
    assert f"output {run_dir} is being written by pid {pid}" in str(refused.value)
    _untouched(run_dir)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("claimed", ["", "launcher"], ids=["no-launcher", "forged-launcher"])
def test_a_rank_started_by_hand_into_a_held_run_is_refused(tmp_path: Path, claimed: str) -> None:
    """No RANK (a rank started by hand is rank 0), or a RUN_LOCKED_BY naming a process that
    does not hold the lock (a stale variable from a launcher's shell): refused in one line."""
    run_dir = tmp_path / "run"
    config_json = _config_json(tmp_path, run_dir)
    with _held(run_dir) as pid:
        env = {RUN_LOCKED_BY: str(pid + 1)} if claimed else {}
        result = _worker(config_json, **env)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "pretrain launch: error:" in line]
    assert len(lines) == 1 and f"is being written by pid {pid}" in lines[0], result.stderr[-2000:]
    _untouched(run_dir)


@pytest.mark.timeout(180)
def test_a_smoke_launch_while_another_smoke_launch_runs_is_refused(tmp_path: Path, capsys) -> None:
    """`launch --smoke` writes RUN/smoke and locks that (not RUN): a second one is refused in one
    line naming the first, before anything is written (two real ones at once were tried by hand:
    one trained, the other refused in this line)."""
    run_dir = tmp_path / "run"
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(tiny_config(run_dir)))
    with _held(run_dir / "smoke") as pid:
        capsys.readouterr()
        assert main(["launch", str(config), "--smoke", "--nproc", "1", "--in-process"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{run_dir / 'smoke'} is being written by pid {pid}" in err[0], err
    assert not (run_dir / "smoke").exists()  # nothing written, not even its log
