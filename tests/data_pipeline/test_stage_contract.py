"""The stage contract: stages declare what the runner needs, so the runner names no stage."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline import global_parts
from data_pipeline.config import PipelineConfig, StagesConfig
from data_pipeline.fingerprint import model_hashes
from data_pipeline.stages import registry as stage_registry
from data_pipeline.stages.base import Stage, build_stage
from data_pipeline.stages.langid import LangIdStage, model_path
from data_pipeline.stages.registry import registry, stage_class, tag_fields
from pretrain.errors import ConfigError, SchemaError
from pretrain.manifest import sha256_file

PLUMBING = (
    "runner.py",
    "ray_job.py",
    "global_parts.py",
    "fingerprint.py",
    "workers.py",
    "parts.py",
    "stage_types.py",
    "throughput.py",
    "stages/base.py",
    "stages/registry.py",
)
STAGE_REGISTRY = list(registry())


def test_the_job_plumbing_names_no_stage() -> None:
    """No string constant in the runner's modules is a stage name or hunts a config key."""
    root = Path(__file__).resolve().parents[2] / "data_pipeline"
    for name in PLUMBING:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        strings = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        assert not strings & set(STAGE_REGISTRY), (name, strings & set(STAGE_REGISTRY))
        assert "model" not in strings, name


def test_the_built_in_stages_are_found_in_their_modules_in_pipeline_order() -> None:
    assert STAGE_REGISTRY == [
        "extract",
        "langid",
        "domain",
        "quality",
        "rules",
        "safety",
        "perplexity",
        "dedup",
    ]


def test_every_rejecting_stage_has_its_reason_column() -> None:
    for stage in ("extract", "langid", "rules", "safety"):
        assert f"{stage}_reason" in [f.name for f in stage_class(stage).columns]


def test_the_built_in_tags_keep_the_types_sidecars_and_mixtures_were_built_with() -> None:
    """The stages declare their tags (`Stage.tags`); encoded sidecars and recipes made before
    rely on these names and types, so a stage changing one is caught here."""
    assert {f.name: str(f.type) for f in tag_fields()} == {
        "lang": "string",
        "domain": "string",
        "quality_score": "float",
        "url_blocked": "bool",
        "unsafe_score": "float",
        "perplexity": "float",
        "ppl_bucket": "string",
        "dup_keep": "bool",
    }


def test_a_tag_must_be_one_of_the_stages_columns(monkeypatch) -> None:
    class Typo(Stage):
        name = "typo"
        order = 95
        columns = (pa.field("typo_score", pa.float32()),)
        tags = ("typo_scor",)

        def __call__(self, batch: pa.Table) -> pa.Table:
            return batch

    monkeypatch.setattr(stage_registry, "_plugins", lambda: {"typo": Typo})
    stage_registry.registry.cache_clear()
    try:
        with pytest.raises(SchemaError, match=r"tags \['typo_scor'\] must be .* among its columns"):
            stage_registry.registry()
    finally:
        monkeypatch.undo()
        stage_registry.registry.cache_clear()


def test_config_sections_come_from_the_registry() -> None:
    assert list(StagesConfig.model_fields) == list(STAGE_REGISTRY)
    with pytest.raises(ValueError, match="bogus"):
        PipelineConfig.model_validate({"inputs": ["x"], "output": "o", "stages": {"bogus": {}}})


def test_declared_models_are_what_the_fingerprint_hashes(tmp_path) -> None:
    stage = LangIdStage()
    assert model_hashes([stage]) == {"langid.model": sha256_file(model_path(stage.config))}
    other = tmp_path / "lid.bin"
    other.write_bytes(b"not the default model")
    custom = LangIdStage(LangIdStage.Config(model=str(other)))
    assert model_hashes([custom]) == {"langid.model": sha256_file(other)}
    dedup = stage_class("dedup")(stage_class("dedup").Config(index={"against": str(tmp_path)}))
    assert dedup.models() == {"index.against": tmp_path}


def test_a_spec_rebuilds_the_same_stage_once_per_process() -> None:
    stage = stage_class("rules")(stage_class("rules").Config(timeout_s=3.0), extra=1)
    rebuilt = build_stage(stage.spec())
    assert type(rebuilt) is type(stage) and rebuilt.config == stage.config
    assert rebuilt.context == {"extra": 1}
    assert global_parts._ready(stage.spec()) is global_parts._ready(stage.spec())  # set up once
    with pytest.raises(ConfigError):
        model_path(LangIdStage.Config(model="/no/such/model.bin"))


def test_every_stage_travels_as_its_spec() -> None:
    """One way to Ray: no stage pickles itself otherwise, and a pickled stage is its spec rebuilt
    (state loaded by setup() stays behind; the config is validated again where it lands)."""
    for name in STAGE_REGISTRY:
        cls = stage_class(name)
        assert "__getstate__" not in vars(cls) and cls.__reduce__ is Stage.__reduce__, name
        stage = cls(cls.Config(), extra=name)
        clone = pickle.loads(pickle.dumps(stage))
        assert type(clone) is cls and clone.spec() == stage.spec(), name
    rules = stage_class("rules")()
    rules.setup()
    assert not hasattr(pickle.loads(pickle.dumps(rules)), "_tokenizer")


def test_a_worker_imports_only_the_stage_it_rebuilds() -> None:
    """A spec names its class, so a fresh worker process runs no registry discovery."""
    import subprocess
    import sys

    spec = stage_class("dedup")().spec()
    code = (
        "import json, sys\n"
        "from data_pipeline.stages.base import build_stage\n"
        f"stage = build_stage(json.loads({json.dumps(spec)!r}))\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('data_pipeline.stages.'))\n"
        "print(type(stage).__name__, loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "DedupStage"
    assert "rules" not in done.stdout and "registry" not in done.stdout
