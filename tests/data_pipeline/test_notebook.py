"""notebooks/corpus_report.ipynb executed (nbclient) on a small shards artifact."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_corpus_report_runs_on_a_small_artifact(ray_local, tmp_path, monkeypatch) -> None:
    out = tmp_path / "shards"
    run_pipeline(
        PipelineConfig.model_validate(
            {"inputs": [str(DATA)], "output": str(out), "ray": {"timeout_s": 200}}
        ),
        progress=False,
    )
    notebook = nbformat.read(REPO / "notebooks" / "corpus_report.ipynb", as_version=4)
    monkeypatch.setenv("CORPUS_ARTIFACT", str(out))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert "'balanced': True" in text
    assert "[dropped] extract:not_text" in text and "[dropped] extract:malformed_json" in text
    assert "lang_score" not in text.split("not tagged in this artifact:")[1].splitlines()[0]
    assert len(images) >= 3  # funnel, mix, tag histograms
