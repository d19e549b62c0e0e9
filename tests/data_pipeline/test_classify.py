"""fastText domain + quality classifiers: `train-classifier` artifacts and the two tagging stages.

Real fastText models are trained here (small dim and bucket, ~1 s each) from the embedded sample.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from data_pipeline.cli import train_classifier
from data_pipeline.fingerprint import model_hashes
from data_pipeline.stages.classify import DomainStage, QualityStage
from data_pipeline.stages.registry import schema_for
from pretrain.config import load_config
from pretrain.errors import ArtifactError, ConfigError
from pretrain.manifest import load_manifest, manifest_sha256, verify
from pretrain.sample import sample_dir

REPO = Path(__file__).resolve().parents[2]
SMALL = ["fasttext.dim=16", "fasttext.bucket=20000", "fasttext.epoch=10"]


def _args(config: str, *overrides: str, dry_run: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        config=str(REPO / "configs" / config), overrides=list(overrides), dry_run=dry_run
    )  # an absolute `config` replaces the configs/ path


def _config(tmp: Path, example: str, edit=None) -> str:
    """The example config with its sample paths made absolute (and `edit` applied), as a file."""
    data = yaml.safe_load((REPO / "configs" / example).read_text())
    for source in data["inputs"]:
        source["path"] = str(sample_dir() / Path(source["path"]).name)
    if edit is not None:
        edit(data)
    path = tmp / example
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classifiers")
    out = {}
    for name in ("domain", "quality"):
        out[name] = root / name
        config = _config(root, f"classifier_{name}.yaml")
        train_classifier(_args(config, f"out={out[name]}", *SMALL))
    return out


def _table(texts: list[str | None]) -> pa.Table:
    n = len(texts)
    columns = {
        "id": [f"d{i}" for i in range(n)],
        "text": texts,
        "url": [None] * n,
        "source": ["test"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
    }
    return pa.Table.from_pydict(columns, schema=schema_for([]))


def _sample_texts(predicate) -> list[str]:
    with gzip.open(sample_dir() / "prose.jsonl.gz", "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return [r["text"] for r in rows if predicate(r)]


@pytest.mark.timeout(120)
def test_artifact_records_labels_accuracy_and_hashes(models):
    for name, labels in (("domain", ["prose", "code", "math"]), ("quality", ["hq", "lq"])):
        manifest = verify(models[name])
        assert manifest["kind"] == "fasttext-model"
        info = json.loads((models[name] / "model.json").read_text())
        assert info["labels"] == labels
        assert info["normalization"]["scheme"] == "pretrain-text-v1"
        assert info["training"]["heldout_documents"] > 20
        assert info["training"]["accuracy"] >= 0.9, info["training"]
        confusion = info["training"]["confusion"]
        assert (
            sum(sum(row.values()) for row in confusion.values())
            == info["training"]["heldout_documents"]
        )
        assert (models[name] / "heldout.png").read_bytes()[:4] == b"\x89PNG"
        assert "heldout.png" in manifest["files"]
        assert manifest["files"][info["model_file"]]["sha256"] == info["model_sha256"]
        # bucket set explicitly: 20k buckets x dim 16 is a few MB, not fastText's 409 MB default
        assert manifest["files"][info["model_file"]]["bytes"] < 5_000_000


@pytest.mark.timeout(60)
def test_domain_stage_tags_code_math_prose_and_keeps_rows(models):
    code = sample_dir() / "code.parquet"
    import pyarrow.parquet as pq

    code_texts = pq.read_table(code).column("text").to_pylist()[-5:]
    math_texts = _sample_texts(lambda r: r["meta"].get("domain") == "math")[-5:]
    prose_texts = _sample_texts(
        lambda r: "linux-doc" in r["source"] and r["meta"].get("lang") == "en"
    )[-5:]
    texts = [*code_texts, *math_texts, *prose_texts, None, "", "   "]
    stage = DomainStage(DomainStage.Config(model=str(models["domain"])))
    stage.setup()
    out = stage(_table(texts))
    declared = schema_for(["domain"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    assert out.column("id").to_pylist() == [f"d{i}" for i in range(len(texts))]
    domains = out.column("domain").to_pylist()
    expected = ["code"] * 5 + ["math"] * 5 + ["prose"] * 5
    agree = sum(d == e for d, e in zip(domains, expected, strict=False))
    assert agree >= 13, list(zip(domains, expected, strict=False))
    assert domains[-3:] == [None, None, None]
    scores = [s for s in out.column("domain_score").to_pylist() if s is not None]
    assert len(scores) == 15 and all(1 / 3 <= s <= 1.0 for s in scores)


@pytest.mark.timeout(60)
def test_quality_score_is_probability_and_ranks_reference_above_junk(models):
    reference = _sample_texts(lambda r: "linux-doc" in r["source"])[-20:]
    junk = _sample_texts(lambda r: "fortunes" in r["source"])[-20:]
    stage = QualityStage(QualityStage.Config(model=str(models["quality"])))
    out = stage(_table([*reference, *junk, None]))
    declared = schema_for(["quality"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    scores = out.column("quality_score").to_pylist()
    assert scores[-1] is None
    assert all(0.0 <= s <= 1.0 for s in scores[:-1])
    ref_mean = sum(scores[:20]) / 20
    junk_mean = sum(scores[20:40]) / 20
    assert ref_mean > 0.7 and junk_mean < 0.3, (ref_mean, junk_mean)


@pytest.mark.timeout(60)
def test_the_manifest_names_the_model_hashes(models):
    stage = QualityStage(QualityStage.Config(model=str(models["quality"])))
    info = json.loads((models["quality"] / "model.json").read_text())
    assert model_hashes([stage]) == {"quality.model": manifest_sha256(models["quality"])}
    assert load_manifest(models["quality"])["model"]["sha256"] == info["model_sha256"]


@pytest.mark.timeout(60)
def test_tampered_or_missing_model_is_refused(models, tmp_path):
    import shutil

    copy = tmp_path / "domain"
    shutil.copytree(models["domain"], copy)
    data = bytearray((copy / "model.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "model.bin").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="sha256"):
        DomainStage(DomainStage.Config(model=str(copy))).setup()
    with pytest.raises(ConfigError, match="train-classifier"):
        DomainStage().setup()
    with pytest.raises(
        ArtifactError, match="does not exist; build it with `pretrain data train-classifier"
    ):
        DomainStage(DomainStage.Config(model=str(tmp_path / "nope"))).setup()
    with pytest.raises(ArtifactError, match="positive_label"):
        QualityStage(QualityStage.Config(model=str(models["domain"]))).setup()


@pytest.mark.timeout(30)
def test_config_mistakes_are_one_line_errors(tmp_path, capsys):
    from data_pipeline.trainers.classifier import ClassifierConfig

    path = REPO / "configs" / "classifier_quality.yaml"
    with pytest.raises(ConfigError, match="positive_label"):
        load_config(ClassifierConfig, path, ["positive_label=good"])
    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load(path.read_text())
    data["inputs"][0]["label_field"] = "meta.domain"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="exactly one of"):
        load_config(ClassifierConfig, bad)
    with pytest.raises(ConfigError, match="bukcet"):
        load_config(ClassifierConfig, path, ["fasttext.bukcet=5"])
    from pretrain.errors import InputError

    def missing_input(data):
        data["inputs"][0]["path"] = str(tmp_path / "none.jsonl")

    with pytest.raises(InputError, match="does not exist"):
        train_classifier(
            _args(
                _config(tmp_path, "classifier_quality.yaml", missing_input), f"out={tmp_path / 'o'}"
            )
        )
    dry = f"out={tmp_path / 'dry'}"  # not runs/models/domain, which a README user has built
    assert train_classifier(_args("classifier_domain.yaml", dry, dry_run=True)) == 0
    assert "config_sha256" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_label_without_records_and_existing_output_refused(tmp_path):
    from pretrain.errors import InputError

    def no_math(data):
        data["inputs"][0]["where"] = {"source": "linux-doc"}

    with pytest.raises(InputError, match="'math' has no training records"):
        train_classifier(
            _args(
                _config(tmp_path, "classifier_domain.yaml", no_math),
                f"out={tmp_path / 'm'}",
                *SMALL,
            )
        )
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ConfigError, match="not empty"):
        train_classifier(_args("classifier_domain.yaml", f"out={tmp_path / 'full'}"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quantized_model_is_smaller_and_still_tags(models, tmp_path):
    out = tmp_path / "quality-q"
    config = _config(tmp_path, "classifier_quality.yaml")
    train_classifier(_args(config, f"out={out}", "quantize=true", *SMALL))
    info = json.loads((out / "model.json").read_text())
    assert info["model_file"] == "model.ftz" and info["quantized"] is True
    full = models["quality"] / "model.bin"
    assert (out / "model.ftz").stat().st_size * 3 < full.stat().st_size
    reference = _sample_texts(lambda r: "linux-doc" in r["source"])[-10:]
    junk = _sample_texts(lambda r: "fortunes" in r["source"])[-10:]
    scores = QualityStage(QualityStage.Config(model=str(out)))(_table([*reference, *junk]))
    values = scores.column("quality_score").to_pylist()
    assert sum(values[:10]) / 10 > sum(values[10:]) / 10 + 0.3


@pytest.mark.timeout(120)
def test_cli_trains_the_example_config_as_shipped(tmp_path, monkeypatch, capsys):
    from pretrain_app.cli import main

    monkeypatch.chdir(REPO)  # the example config names the sample by its repository path
    out = tmp_path / "domain"
    argv = ["data", "train-classifier", "configs/classifier_domain.yaml", "--set", f"out={out}"]
    assert main([*argv, *(x for s in SMALL for x in ("--set", s))]) == 0
    assert "held-out accuracy" in capsys.readouterr().out
    assert verify(out)["kind"] == "fasttext-model"
    assert (
        main(
            [
                "data",
                "train-classifier",
                "configs/classifier_domain.yaml",
                "--set",
                "fasttext.bukcet=5",
            ]
        )
        == 2
    )
    assert "unknown key 'fasttext.bukcet'" in capsys.readouterr().err


def test_domain_from_an_input_field_needs_no_classifier(tmp_path):
    """Dolma-style `source` and RedPajama-style `meta.redpajama_set_name` (a dotted path, as the
    reader's field settings take it) give the domain tag through a value map, read by the real JSONL reader; no model is
    set, loaded or hashed. Before, stages.domain took only a fastText model."""
    from data_pipeline.stages.base import build_stage
    from tests.data_pipeline.readall import read_all

    records = [
        {
            "id": "a",
            "text": "def f(): pass",
            "source": "github",
            "meta": {"redpajama_set_name": "RedPajamaGithub"},
        },
        {
            "id": "b",
            "text": "Let x be prime.",
            "source": "arxiv",
            "meta": {"redpajama_set_name": "RedPajamaArXiv"},
        },
        {"id": "c", "text": "A story.", "source": "books", "metadata": {"domain": "fiction"}},
        {"id": "d", "text": "No label here."},
    ]
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    batch, _ = read_all(path)
    values = {"RedPajamaGithub": "code", "RedPajamaArXiv": "math"}
    cases = {
        ("meta.redpajama_set_name", None): ["code", "math", None, None],
        ("redpajama_set_name", "other"): [None] * 4,  # a key is the whole dotted path
        ("source", "other"): ["other", "other", "other", "other"],  # d: the reader's default
        ("source", None): ["github", "arxiv", "books", batch.column("source")[3].as_py()],
        ("metadata.domain", None): [None, None, "fiction", None],
    }
    for (field, unmapped), expected in cases.items():
        config = {"field": field, "values": values, "unmapped": unmapped}
        stage = build_stage(("domain", f"{DomainStage.__module__}:DomainStage", config, {}))
        stage.check()
        stage.setup()
        assert stage.models() == {} and model_hashes([stage]) == {}
        out = stage(batch)
        assert out.column("domain").to_pylist() == expected, field
        assert out.column("domain_score").to_pylist() == [
            None if tag is None else 1.0 for tag in expected
        ]
    with pytest.raises(ValueError, match="not both"):
        DomainStage.Config.model_validate({"field": "source", "model": "x"})
