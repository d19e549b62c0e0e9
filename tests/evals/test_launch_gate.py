"""`pretrain launch` of a `run.kind: full` config goes through trainer.gate: refused without a
report, launched with --override-gate and the reason recorded in the run's manifest."""

from __future__ import annotations

import json

import pytest
import yaml

from pretrain.manifest import load_manifest
from pretrain_app.cli import main

TINY_FULL = {
    "run": {"kind": "full", "train_steps": 2, "seed": 3},
    "model": {
        "num_layers": 1,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "ffn_hidden_size": 64,
        "seq_length": 32,
        "make_vocab_size_divisible_by": 64,
    },
    "optim": {"lr": 1e-3, "warmup_steps": 0},
    "batch": {"micro_batch_size": 2, "global_batch_size": 2},
    "data": {
        "source": "synthetic",
        "synthetic_documents": 16,
        "synthetic_vocab": 64,
        "phases": [{"name": "main", "seq_length": 32}],
    },
    "checkpoint": {"every": 2},
    "metrics": {"trackers": [], "peak_flops": 1e11},
}


def _write(tmp_path, **gate):
    config = {
        **TINY_FULL,
        "run": {**TINY_FULL["run"], "out_dir": str(tmp_path / "run")},
        "gate": gate,
    }
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_full_launch_without_a_report_is_refused(tmp_path, capsys):
    path = _write(tmp_path, report_dir=str(tmp_path / "no-report"))
    assert main(["launch", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no ablation report at gate.report_dir" in err and "--override-gate" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.timeout(240)
def test_override_gate_launches_and_records_the_reason(tmp_path):
    path = _write(tmp_path, report_dir=str(tmp_path / "no-report"))
    reason = "smoke test of the launcher, not a real run"
    assert main(["launch", str(path), "--override-gate", reason, "--in-process"]) == 0
    manifest = load_manifest(tmp_path / "run")
    assert manifest["gate"]["status"] == "overridden"
    assert manifest["gate"]["override_reason"] == reason
    assert "no ablation report" in manifest["gate"]["refusal"]
    launch = json.loads((tmp_path / "run" / "launch.json").read_text())
    assert launch["gate"]["override_reason"] == reason
