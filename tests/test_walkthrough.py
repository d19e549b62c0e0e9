"""The README's step-by-step block runs as written, in order, from the root of a fresh copy of the
repository with a clean environment (a walkthrough that cannot rot)."""

from __future__ import annotations

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
    for command in walkthrough_commands():
        done = subprocess.run(
            ["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=1500
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    show = subprocess.run(
        ["bash", "-c", "pretrain show --json runs/full-sample/evals"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert show.returncode == 0 and '"problems": []' in show.stdout
    for kind in ("eval", "run", "mixture", "encoded", "tokenizer", "shards"):
        assert f'"kind": "{kind}"' in show.stdout
