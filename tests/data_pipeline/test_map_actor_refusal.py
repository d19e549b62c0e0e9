"""A map stage whose setup refuses (a model the user must fix) inside a Ray map actor: the real
`pretrain data run` (a subprocess with a clean environment, its own embedded Ray) ends with the
stage's one-line error and exit 2. Before, the refusal raised in the actor's constructor, and the
user got Ray's ActorDiedError text (the actor's creation task traceback) instead."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.data_pipeline.raytools import REPO, clean_env, data_run

PLUGIN = """
import pyarrow as pa

from data_pipeline.stages.base import Stage, StageConfig
from pretrain.errors import ArtifactError


class RefuseConfig(StageConfig):
    model: str = "toy.bin"


class Refuses(Stage):
    name = "toyrefuse"
    order = 56
    columns = (pa.field("toyrefuse_score", pa.float32()),)
    Config = RefuseConfig

    def setup(self):
        raise ArtifactError(
            f"stages.toyrefuse.model {self.config.model} was trained for another tokenizer; "
            "retrain it"
        )

    def __call__(self, batch):
        return self.append(batch, {"toyrefuse_score": [0.0] * batch.num_rows})
"""


def _plugin(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "toy_refuse.py").write_text(PLUGIN, encoding="utf-8")
    info = root / "toy_refuse-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-refuse\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pretrain.stages]\ntoyrefuse = toy_refuse:Refuses\n")
    return root


@pytest.mark.ray
@pytest.mark.timeout(600)
# [0] is the subtle case (no block ever reaches an actor) and stays in the default suite; [20]
# goes through the same eager setup with documents (each case is a CLI run with its own Ray:
# ~70 s at load 30)
@pytest.mark.parametrize("docs", [pytest.param(20, marks=pytest.mark.slow), 0])
def test_a_stage_setup_refused_in_a_map_actor_is_one_line(tmp_path: Path, docs: int) -> None:
    """With no documents the actors get no block: before, the refusal was never raised (it
    waited for the first call) and the run ended as a success, the stage never set up."""
    site = _plugin(tmp_path / "site")
    (tmp_path / "in").mkdir()
    with (tmp_path / "in" / "docs.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(docs):
            text = f"document {i} " + "with a few words in it " * 8
            handle.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    config = {
        "inputs": [str(tmp_path / "in")],
        "output": str(tmp_path / "out"),
        "stages": {"extract": {}, "toyrefuse": {}},
        "ray": {"num_cpus": 1, "timeout_s": 300},
    }
    done = subprocess.run(
        data_run(config, tmp_path / "config.json"),
        cwd=REPO,
        env=clean_env(tmp_path / "home", PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "pretrain data run: error: stages.toyrefuse.model toy.bin was trained for another "
        "tokenizer; retrain it"
    ), done.stderr[-3000:]
    assert "ActorDiedError" not in done.stderr and "Traceback" not in done.stderr
