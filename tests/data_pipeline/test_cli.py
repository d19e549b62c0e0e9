"""`pretrain data run|train-lm|train-classifier` through the public entry point `main(argv)`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from data_pipeline.stages.registry import Unavailable, registry
from pretrain_app.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
REPO = Path(__file__).resolve().parents[2]


def _write_config(tmp_path: Path, **extra) -> Path:
    config = {
        "inputs": [str(DATA / "docs.jsonl")],
        "output": str(tmp_path / "out"),
        "stages": {"extract": {}, "langid": {}},
        **extra,
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_shipped_config_resolves(capsys) -> None:
    assert (
        main(
            [
                "data",
                "run",
                str(REPO / "configs" / "pipeline.yaml"),
                "--dry-run",
                "--set",
                "stages.extract.extractor=trafilatura",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "extractor: trafilatura" in out and "# config_sha256: " in out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stages.langidd.model=x", "unknown key 'stages.langidd'"),
        ("select.drop=[extract]", "must be stage:reason"),
        ("stages.extract.timeout_s=-1", "stages.extract: timeout_s = -1"),
        ("stages.extract.enabled=false", "stages.extract must be present and enabled"),
    ],
)
def test_config_mistakes_are_one_line_errors(tmp_path, capsys, override, message) -> None:
    assert main(["data", "run", str(_write_config(tmp_path)), "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_enabled_stage_that_does_not_exist_is_named(tmp_path, capsys, monkeypatch) -> None:
    broken = Unavailable("not_built:Nope", "ModuleNotFoundError: No module named 'not_built'")
    monkeypatch.setitem(registry(), "safety", broken)
    assert main(["data", "run", str(_write_config(tmp_path)), "--set", "stages.safety={}"]) == 2
    err = capsys.readouterr().err
    assert "stages.safety is enabled but" in err and "stages.safety.enabled=false" in err
    assert (
        main(
            [
                "data",
                "run",
                str(_write_config(tmp_path)),
                "--dry-run",
                "--set",
                "stages.safety.enabled=false",
            ]
        )
        == 0
    )


def test_unreadable_input_is_a_one_line_error(tmp_path, capsys) -> None:
    (tmp_path / "broken.jsonl.gz").write_bytes(b"not gzip")
    config = _write_config(tmp_path, inputs=[str(tmp_path / "broken.jsonl.gz")])
    assert main(["data", "run", str(config)]) == 2
    assert "broken.jsonl.gz: not a gzip file" in capsys.readouterr().err


def test_train_commands_reach_the_model_handlers(tmp_path, capsys) -> None:
    for command in ("train-lm", "train-classifier"):
        assert main(["data", command, str(tmp_path / "missing.yaml")]) == 2
        assert "missing.yaml does not exist" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_data_run_then_verify_then_tamper(ray_local, tmp_path, capsys) -> None:
    config = _write_config(tmp_path, ray={"timeout_s": 200})
    assert main(["data", "run", str(config), "--set", "shard_rows=5"]) == 0
    assert "13 docs in, 9 kept, 4 dropped (ledger balanced: True)" in capsys.readouterr().out
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"][:4] == ["pretrain", "data", "run", str(config)]
    assert manifest["config"]["shard_rows"] == 5
    assert main(["verify", str(out)]) == 0
    shard = out / "data" / "docs-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    assert main(["verify", str(out)]) == 2
    assert "docs-00000.parquet does not match its sha256" in capsys.readouterr().err
