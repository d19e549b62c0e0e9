"""The reading notebooks execute (nbclient, with a timeout) on a small artifact set."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from pretrain.manifest import write_manifest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _execute(name: str, monkeypatch, **env: str) -> list[str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        book,
        timeout=90,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS.parent)}},
    ).execute()
    return [
        "".join(out.get("text", "") for out in cell.get("outputs", []))
        for cell in book.cells
        if cell.cell_type == "code"
    ]


def _synthetic_run(root: Path) -> Path:
    """A run artifact as `pretrain launch` writes it, plus `pretrain eval run` results."""
    (root / "evals").mkdir(parents=True)
    lines = [{"step": s, "loss": 5.0 / s, "tokens_per_s": 1000 + s} for s in range(1, 6)]
    lines.append({"step": 3, "event": "checkpoint"})
    lines.append(
        {"step": 4, "event": "eval", "val/loss": 2.0, "val/bpb": 0.9, "val/bpb/web/en": 0.8}
    )
    (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    results = [
        {
            "step": s,
            "metrics": {
                "bpb": 3.0 / s,
                "bpb/web/en": 3.1 / s,
                "bpb/code/en": 2.5 / s,
                "task/mc/acc": 0.5,
            },
        }
        for s in (2, 4)
    ]
    (root / "evals" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    write_manifest(
        root,
        "run",
        counts={"steps": 5},
        extra={
            "gate": {"status": "overridden", "override_reason": "test"},
            "tokenizer": {"sha256": "a" * 64},
        },
    )
    return root


@pytest.mark.timeout(180)
def test_ablation_report_notebook_runs_on_a_report(ablation_dir, monkeypatch):
    outputs = _execute("ablation_report.ipynb", monkeypatch, ABLATION_DIR=str(ablation_dir))
    text = "\n".join(outputs)
    chosen = json.loads((ablation_dir / "report.json").read_text())["chosen_recipe_name"]
    assert f"chosen recipe : {chosen}" in text
    assert "passed        : True" in text
    assert "CV R2" in text


@pytest.mark.timeout(180)
def test_training_report_notebook_runs_on_a_run(tmp_path, monkeypatch):
    run = _synthetic_run(tmp_path / "run")
    text = "\n".join(_execute("training_report.ipynb", monkeypatch, RUN_DIR=str(run)))
    assert "5 steps, final loss 1.0000" in text
    assert "overridden" in text
    assert "step 4: bpb 0.7500" in text
    assert "val step 4: bpb 0.9000 {'web/en': 0.8}" in text
