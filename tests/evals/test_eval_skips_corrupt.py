"""`pretrain eval run RUN` over a run one of whose checkpoints is corrupt: that checkpoint is
reported in one line and listed in the eval manifest, the others are evaluated (before, the run
stopped at the first corrupt one and wrote nothing); a corrupt checkpoint named alone, or a run
whose checkpoints are all corrupt, is refused in one line (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest
from tests.trainer.trainer_testlib import tiny_config

PRETRAIN = str(Path(sys.executable).parent / "pretrain")


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))  # same size


def _shard(checkpoint: Path) -> Path:
    return max((p for p in checkpoint.rglob("*.distcp")), key=lambda p: p.stat().st_size)


def _eval(target: Path, chain: dict, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MASTER_"))}
    command = [PRETRAIN, "eval", "run", str(target), "--sets", str(chain["evalsets"])]
    command += ["--tokenizer", str(chain["tokenizer"]), "--max-docs", "2", "--tasks"]
    command += ["--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pretrain eval run: error:")]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_eval_run_skips_a_corrupt_checkpoint_and_evaluates_the_others(chain, tmp_path):
    from tests.trainer.trainer_testlib import run_ranks

    run_dir = tmp_path / "run"
    run_ranks(tiny_config(run_dir, data={"synthetic_vocab": 400}), 1)  # steps 2, 4, 6
    checkpoints = run_dir / "checkpoints"
    _flip(_shard(checkpoints / "iter_0000004"))

    done = _eval(run_dir, chain, tmp_path / "evals")
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [line for line in done.stderr.splitlines() if "skipped (not loadable)" in line]
    assert len(skipped) == 1 and "iter_0000004" in skipped[0], done.stderr[-3000:]
    lines = (tmp_path / "evals" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 6]
    manifest = load_manifest(tmp_path / "evals")
    assert manifest["counts"]["skipped_checkpoints"] == 1
    assert [e["step"] for e in manifest["skipped_checkpoints"]] == [4]

    alone = _eval(checkpoints / "iter_0000004", chain, tmp_path / "alone")
    assert alone.returncode == 2 and len(_errors(alone.stderr)) == 1, alone.stderr[-3000:]
    assert not (tmp_path / "alone" / "results.jsonl").exists()

    for step in (2, 6):
        _flip(_shard(checkpoints / f"iter_{step:07d}"))
    none = _eval(run_dir, chain, tmp_path / "none")
    errors = _errors(none.stderr)
    assert none.returncode == 2 and len(errors) == 1, none.stderr[-3000:]
    assert "none of the 3 checkpoints" in errors[0]
    assert not (tmp_path / "none" / "results.jsonl").exists()
