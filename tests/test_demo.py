"""`pretrain demo` from clean (its own process, clean environment) decides on evidence: the
ablation picks the base recipe by a margin (the design of evals/demo.py: a variant that differs
enough that the decision is the same on every run and machine), and the launch passes the gate on
that report rather than falling back to --override-gate. Run again into the same folder (a user's
second `make demo`), it reuses what it verified, and a proxy run deleted in between is trained
again to the same bits: the sweep is deterministic, so its decision is too.

One demo, not two from clean: the other parts of a second clean demo are checked where they are
cheap (the tokenizer's content id in tests/tokenizer/test_tokenizer_id_content.py, the data job's
bytes across runs in test_killsweep and test_runner_cluster_nodes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest, manifest_sha256
from tests.conftest import clean_env


def _demo(out: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "demo", "--out", str(out)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def _report(out: Path) -> dict:
    return json.loads((out / "ablation" / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_demo_from_clean_decides_on_evidence_and_retrains_a_proxy_to_the_same_bits(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    _demo(out)
    report = _report(out)
    assert report["passed"] is True and report["chosen_recipe_name"] == "base"
    assert load_manifest(out / "run")["gate"]["status"] == "passed"
    # stable by margin, not by luck: the interval's lower bound is well clear of zero
    interval = report["decision"]["interval"]
    assert interval["lower"] > 0.25 * interval["effect"] > 0  # 0.080 of 0.123
    bpb = {run["run_key"]: run["metrics"]["bpb"] for run in report["runs"]}
    assert len(bpb) == 6
    kept = {name: manifest_sha256(out / name) for name in ("shards", "tokenizer", "run")}

    retrain = next(r["run_key"] for r in report["runs"] if r["recipe_name"] == "base")
    shutil.rmtree(next(p for p in (out / "ablation-runs").iterdir() if retrain.startswith(p.name)))
    printed = _demo(out)
    assert "[ablate] 6 runs: 5 cached, 1 to run" in printed
    again = _report(out)
    assert {run["run_key"]: run["metrics"]["bpb"] for run in again["runs"]} == bpb
    assert again["decision"] == report["decision"]
    assert {name: manifest_sha256(out / name) for name in kept} == kept  # reused, not rebuilt
