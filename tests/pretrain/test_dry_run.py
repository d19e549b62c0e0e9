"""`--dry-run` runs every check the real run makes before working, with the same one-line errors,
and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pretrain.sample import sample_dir
from pretrain_app.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "tests" / "data" / "data_pipeline" / "docs.jsonl"


def _pipeline(tmp_path: Path, **stages) -> Path:
    config = {
        "inputs": [str(DOCS)],
        "output": str(tmp_path / "out"),
        "stages": {"extract": {}, "langid": {}, "rules": {}, "dedup": {}, **stages},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stages.dedup.threshold=high", "stages.dedup: threshold = 'high'"),
        ("stages.rules.min_wrods=3", "stages.rules: unknown key 'min_wrods'"),
        ("stages.dedup.num_perm=0", "stages.dedup: num_perm = 0"),
        ("stages.langid.model=/nonexistent/lid.ftz", "stages.langid.model = '/nonexistent"),
        ("stages.domain.enabled=true", "stages.domain.model is not set"),
        ("stages.perplexity={model: /no/lm}", "KenLM artifact '/no/lm' does not exist"),
        ("inputs=[/no/such/dir/]", "input /no/such/dir/ does not exist"),
    ],
)
def test_data_run_dry_run_refuses_what_the_run_would(tmp_path, capsys, override, message):
    config = str(_pipeline(tmp_path))
    dry = _run(capsys, "data", "run", config, "--set", override, "--dry-run")
    assert dry[0] == 2 and message in dry[2] and "\n" not in dry[2], dry
    assert dry[1] == ""  # nothing printed as if it were fine
    assert not (tmp_path / "out").exists()
    # the real run refuses with the very same line before it starts any work
    real = _run(capsys, "data", "run", config, "--set", override)
    assert real[0] == 2 and real[2] == dry[2]
    assert not (tmp_path / "out").exists()


def test_data_run_dry_run_passes_a_good_config_and_writes_nothing(tmp_path, capsys):
    code, out, err = _run(capsys, "data", "run", str(_pipeline(tmp_path)), "--dry-run")
    assert code == 0 and err == ""
    assert "# checked: 1 input files open; stages extract, langid, rules, dedup" in out
    assert yaml.safe_load(out)["stages"]["dedup"] == {}
    assert not (tmp_path / "out").exists()


def test_data_run_dry_run_refuses_an_output_of_another_job(tmp_path, capsys):
    parts = tmp_path / "out" / ".parts"
    parts.mkdir(parents=True)
    (parts / "fingerprint.json").write_text('{"config_sha256": "other"}')
    code, _, err = _run(capsys, "data", "run", str(_pipeline(tmp_path)), "--dry-run")
    assert code == 2 and "holds shards made with a different config" in err


def test_data_run_dry_run_verifies_model_artifacts(tmp_path, capsys):
    data = yaml.safe_load((REPO / "configs" / "classifier_domain.yaml").read_text())
    for source in data["inputs"]:
        source["path"] = str(sample_dir() / Path(source["path"]).name)
    data["out"] = str(tmp_path / "domain")
    data["fasttext"].update(dim=8, bucket=10000, epoch=2)
    (tmp_path / "clf.yaml").write_text(yaml.safe_dump(data))
    assert main(["data", "train-classifier", str(tmp_path / "clf.yaml")]) == 0
    capsys.readouterr()
    config = str(_pipeline(tmp_path, domain={"model": str(tmp_path / "domain")}))
    code, out, _ = _run(capsys, "data", "run", config, "--dry-run")
    assert code == 0 and "models verified" in out
    model_file = next((tmp_path / "domain").glob("*.bin"))
    raw = bytearray(model_file.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, one byte changed
    model_file.write_bytes(bytes(raw))
    code, out, err = _run(capsys, "data", "run", config, "--dry-run")
    assert code == 2 and out == "" and str(tmp_path / "domain") in err and "\n" not in err
