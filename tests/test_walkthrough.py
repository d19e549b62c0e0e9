"""The README's step-by-step block (what `make demo` runs) runs as written, in order, from the root
of a fresh copy of the repository with a clean environment (a walkthrough that cannot rot). Its
sweep decides on evidence: the ablation picks the base recipe by a margin (the design of
configs/ablation_sample.yaml: a variant that differs enough that the decision is the same on every
run and machine) and the launch passes the gate on that report. Run again, the sweep reuses its
finished proxy runs, and a proxy run deleted in between is trained again to the same bits."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- walkthrough:start -->\s*```bash\n(.*?)```", re.S)


def walkthrough_commands() -> list[str]:
    """The commands of the README block (comments stripped, one command per line)."""
    match = BLOCK.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no walkthrough block"
    return [
        line for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")
    ]


def test_walkthrough_block_chains_through_runs():
    commands = walkthrough_commands()
    assert all(c.startswith("pretrain ") for c in commands)
    order = [c.split()[1:3] for c in commands]
    assert order[0] == ["data", "train-classifier"] and ["data", "run"] in order
    assert order.index(["data", "run"]) < order.index(["tokenizer", "train"])
    assert commands[-1].startswith("pretrain show runs/")
    for config in re.findall(r"configs/\S+\.yaml", "\n".join(commands)):
        assert (REPO / config).is_file(), config


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_readme_walkthrough_runs_as_written(tmp_path):
    copy = tmp_path / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in files:
        if (REPO / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, copy / rel)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(copy)  # the copy's code, not the checkout's

    def sh(command: str) -> str:
        done = subprocess.run(
            ["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=1500
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        return done.stdout + done.stderr

    for command in walkthrough_commands():
        sh(command)
    show = sh("pretrain show --json runs/full-sample/evals")
    assert '"problems": []' in show
    for kind in ("eval", "run", "mixture", "encoded", "tokenizer", "shards"):
        assert f'"kind": "{kind}"' in show

    report = json.loads((copy / "runs/ablation/report.json").read_text())
    assert report["passed"] is True and report["chosen_recipe_name"] == "base"
    run_manifest = json.loads((copy / "runs/full-sample/manifest.json").read_text())
    assert run_manifest["gate"]["status"] == "passed"
    # stable by margin, not by luck: the interval's lower bound is well clear of zero
    interval = report["decision"]["interval"]
    assert interval["lower"] > 0.25 * interval["effect"] > 0
    bpb = {run["run_key"]: run["metrics"]["bpb"] for run in report["runs"]}
    assert len(bpb) == 6

    retrain = next(r["run_key"] for r in report["runs"] if r["recipe_name"] == "base")
    runs = copy / "runs/ablation-runs"
    shutil.rmtree(next(p for p in runs.iterdir() if retrain.startswith(p.name)))
    ablate = next(c for c in walkthrough_commands() if c.startswith("pretrain ablate"))
    assert "[ablate] 6 runs: 5 cached, 1 to run" in sh(ablate)
    again = json.loads((copy / "runs/ablation/report.json").read_text())
    assert {run["run_key"]: run["metrics"]["bpb"] for run in again["runs"]} == bpb
    assert again["decision"] == report["decision"]
