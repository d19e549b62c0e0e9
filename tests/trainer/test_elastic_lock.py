"""A multi-node launch without --node-rank (torchrun's c10d rendezvous assigns the node ranks, so
no launcher knows it is node 0) still keeps a second launch out of the run directory: every
launcher refuses a held run directory before writing anything, and global rank 0 takes the
writer lock for the run itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from pretrain.config import config_dict, parse_config
from pretrain_app.cli import main
from tests.trainer.trainer_testlib import tiny_config
from trainer.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys\n"
    "from pretrain.provenance import recorded\n"
    "from pretrain.locking import output_lock\n"
    "with recorded(['first', 'job']), output_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.read()\n"
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return {**{k: v for k, v in env.items() if k not in drop}, **extra}


@contextmanager
def _held(run_dir: Path) -> Iterator[int]:
    """Another process holds run_dir's writer lock until the block ends (waits for 'held')."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)],
        cwd=REPO,
        env=_clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


@pytest.mark.timeout(120)
def test_an_elastic_launch_into_a_held_run_dir_is_refused_before_writing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(tiny_config(run_dir, parallel={"nodes": 2})))
    argv = ["launch", str(path), "--nnodes", "2", "--nproc", "1"]
    argv += ["--rdzv-endpoint", "127.0.0.1:9", "--rdzv-id", "second"]
    with _held(run_dir) as pid:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is being written by pid {pid}" in err[0], err
    assert "first job" in err[0]
    assert {p.name for p in run_dir.iterdir()} <= {".logs"}  # this launch's own log only
    assert not (run_dir / "launch.json").exists() and not (run_dir / "launch").exists()


def _worker(config_json: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """A rank as torchrun starts it (`RANK` ...) with no launcher holding the run's lock."""
    env = _clean_env(**env_extra)
    return subprocess.run(
        [sys.executable, "-m", "trainer.worker", str(config_json)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(180)
def test_global_rank_zero_of_an_elastic_launch_takes_the_writer_lock(tmp_path):
    run_dir = tmp_path / "run"
    config = parse_config(TrainConfig, tiny_config(run_dir))
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps(config_dict(config)))
    with _held(run_dir) as pid:
        result = _worker(config_json, RANK="0")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "pretrain launch: error:" in line]
    assert len(lines) == 1 and f"is being written by pid {pid}" in lines[0], result.stderr[-2000:]
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "metrics.jsonl").exists()
