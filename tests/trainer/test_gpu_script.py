"""The prepared GPU benchmark's CPU --dry-run: same code path, tiny shape, both stacks train."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.timeout(240)
def test_gpu_benchmark_dry_run_runs_both_stacks_and_reports_mfu(repo_root):
    proc = subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "gpu_trainer.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=repo_root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["dry_run"] is True and result["device"] == "cpu"
    assert result["ours_tokens_per_s"] > 0 and result["plain_tokens_per_s"] > 0
    assert result["mfu_formula"].startswith("(6*N + 12*L*S*H*Q)")
    assert result["mfu_ours"] > 0 and result["peak_flops"] == 989e12
    assert [case["case"] for case in result["cases"]] == ["tiny"]
    assert result["fast_path"]["sequence_parallel"] is False  # CPU: every fusion off
    assert not result["fast_path"]["bias_activation_fusion"]
    zero = result["zero_check"]  # stages 2/3 need CUDA: the dry run checks 0 and 1
    assert sorted(zero["losses"]) == ["0", "1"]
    assert zero["errors"] == {} and zero["max_abs_diff_vs_zero0"]["1"] < 1e-4
    assert not (repo_root / "benchmarks" / "results" / "trainer_gpu_dryrun.json").exists()
