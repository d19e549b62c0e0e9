"""Changing the mixture mid-run (issue 35.1): a run trained on mixture A resumes on a re-plan of
A made at the checkpoint's consumed count. The batches it trained stay A's, the ones after follow
the new weights, no component goes past its epoch cap, and `pretrain mixture report --run` shows
both phases of the run. A re-plan at another count is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from mixtures.dataset import MixtureDataset
from pretrain.artifacts import mixture as mixture_kind
from pretrain.config import parse_config
from pretrain.manifest import load_manifest
from pretrain_app.cli import main
from tests.mixtures.conftest import make_encoded, mixture_config
from tests.trainer.trainer_testlib import run_ranks, tiny_config

WIDTH = 16
NEW_WEIGHTS = (0.2, 0.2, 0.6)


def _build(out: Path, encoded: Path, batches: int, replan: dict | None = None) -> Path:
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig

    data = mixture_config(encoded, out, total_tokens=WIDTH * 32 * batches)
    if replan is not None:
        for component, weight in zip(data["recipe"]["components"], NEW_WEIGHTS, strict=True):
            component["weight"] = weight
        data["replan"] = replan
    build_mixture(parse_config(MixtureConfig, data))
    return out


def _config(run_dir: Path, mixture: Path, steps: int | None) -> dict:
    return tiny_config(
        run_dir,
        run={"train_steps": steps},
        model={"vocab_size": 60001, "seq_length": 64},
        batch={"micro_batch_size": 8, "global_batch_size": WIDTH},
        data={"source": "mixture", "mixture_dir": str(mixture)},
        checkpoint={"every": 3},
    )


def _launch_dry_run(tmp_path: Path, config: dict, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    path = tmp_path / "launch.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    code = main(["launch", str(path), "--nproc", "1", "--dry-run"])
    return code, capsys.readouterr().err.strip()


@pytest.mark.timeout(400)
def test_resume_on_a_replan_continues_with_the_new_weights(tmp_path, capsys) -> None:
    encoded = make_encoded(tmp_path / "enc")
    mix_a = _build(tmp_path / "a", encoded, batches=8)
    run_dir = tmp_path / "run"
    run_ranks(_config(run_dir, mix_a, steps=3), 1)  # checkpoint iter_3: 3 batches = 48 samples
    consumed = 3 * WIDTH

    wrong = _build(tmp_path / "c", encoded, 6, {"mixture": str(mix_a), "consumed_sequences": 32})
    code, err = _launch_dry_run(tmp_path, _config(run_dir, wrong, None), capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "resume refused" in err and "replan.consumed_sequences=48" in err

    mix_b = _build(
        tmp_path / "b", encoded, 6, {"mixture": str(mix_a), "consumed_sequences": consumed}
    )
    code, err = _launch_dry_run(tmp_path, _config(run_dir, mix_b, None), capsys)
    assert code == 0, err
    run_ranks(_config(run_dir, mix_b, None), 1)  # resumes at batch 3, trains batches 3..5

    old, new = MixtureDataset(mix_a), MixtureDataset(mix_b)
    for i in range(consumed):  # the batches the checkpoint trained are A's, token for token
        assert np.array_equal(new[i]["tokens"], old[i]["tokens"])
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["batch"] for r in steps] == [0, 1, 2, 3, 4, 5]
    assert any(r.get("event") == "resume" and r["step"] == 3 for r in records)
    trained = np.array([steps[-1]["sequences_per_component"][n] for n in new.component_names])
    components = mixture_kind.open(mix_b).index(0)["component"]  # of every sample
    assert np.array_equal(trained, np.bincount(components[: 6 * WIDTH], minlength=3))
    after = np.bincount(components[consumed : 6 * WIDTH], minlength=3)
    assert np.abs(after - np.array(NEW_WEIGHTS) * after.sum()).max() <= 3  # 1 per batch
    _check_caps(mix_b, new)

    report = tmp_path / "report"
    assert main(["mixture", "report", str(mix_b), "--run", str(run_dir), "--out", str(report)]) == 0
    shown = capsys.readouterr().out
    assert "before the re-plan: batches 0-2" in shown and "after the re-plan: batches 3-5" in shown
    segments = json.loads((report / "report.json").read_text())["run"]["segments"]
    assert [s["build_sha256"] for s in segments] == [
        load_manifest(mix_a)["build_sha256"],
        load_manifest(mix_b)["build_sha256"],
    ]
    for segment in segments:
        for component in segment["components"]:
            assert component["trained_tokens"] == component["mixture_tokens"]
    books = [s["components"][2]["trained_share"] for s in segments]
    assert books[1] == pytest.approx(0.6, abs=1 / WIDTH) and books[0] < 0.4


def _check_caps(mixture: Path, dataset: MixtureDataset) -> None:
    """No component's windows are drawn more often than its max_epochs allows."""
    caps = [c["max_epochs"] for c in load_manifest(mixture)["components"]]
    index = np.load(mixture / "index" / "0-main.npy")
    for k, cap in enumerate(caps):
        drawn = index["sequence"][index["component"] == k]
        per_epoch = dataset.sequences_per_epoch[k]
        assert drawn.size <= cap * per_epoch
        assert np.bincount(drawn % per_epoch).max() <= int(np.ceil(cap))
        assert np.unique(drawn).size == drawn.size  # each (epoch, window) at most once
