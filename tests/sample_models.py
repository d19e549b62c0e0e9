"""The tests' small models and pipeline config, trained from the embedded sample by the same code
as `pretrain data train-classifier` / `train-lm` (tests/conftest.py's `demo_models` fixture).

`build_demo_models(raw_dir, out_dir)` returns {"domain", "quality", "lm"}: artifact directories
for the pipeline config (`stages.domain.model`, `stages.quality.model`, `stages.perplexity.model`).
The configs are those of configs/classifier_domain.yaml, classifier_quality.yaml and lm.yaml,
with the inputs pointed at the sample copies in `raw_dir` and smaller models (fastText dim 32 with
50k buckets, KenLM order 4). Artifacts from an earlier run are reused when they still verify.

Labels: domain = prose (English and Chinese prose.jsonl.gz records, meta.domain en/zh), math
(meta.domain math), code (code.parquet). Quality: hq = kernel docs, man pages and math manuals;
lq = fortune cookies / short quotes, SEO spam, mojibake and log-like machine output.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from data_pipeline.config import PipelineConfig
from data_pipeline.stages.registry import registry
from data_pipeline.trainers.classifier import ClassifierConfig, train_classifier
from data_pipeline.trainers.lm import LanguageModelConfig, train_lm
from pretrain.artifacts import model as model_kind
from pretrain.config import parse_config
from pretrain.errors import ArtifactError
from pretrain.provenance import recorded

FASTTEXT = {"dim": 32, "bucket": 50_000, "epoch": 15, "lr": 0.5, "word_ngrams": 2, "thread": 1}
PROSE, CODE = "prose.jsonl.gz", "code.parquet"
EXAMPLES: dict[str, dict[str, Any]] = {
    "domain": {
        "name": "domain",
        "labels": ["prose", "code", "math"],
        "inputs": [
            {
                "path": PROSE,
                "label_field": "meta.domain",
                "label_map": {"en": "prose", "zh": "prose"},
            },
            {"path": CODE, "label": "code"},
        ],
    },
    "quality": {
        "name": "quality",
        "labels": ["hq", "lq"],
        "positive_label": "hq",
        "inputs": [
            {
                "path": PROSE,
                "label": "hq",
                "where": {"source": "linux-doc|manpages|texlive|sympy|maxima"},
            },
            {
                "path": PROSE,
                "label": "lq",
                "where": {"source": "fortunes|hand:(seo-spam|garbled|log-like)"},
            },
        ],
    },
    "lm": {
        "order": 4,
        "max_tokens": 400_000,
        "prune_singletons_from": 3,
        "languages": {
            "en": {
                "inputs": [
                    {"path": PROSE, "where": {"source": "linux-doc|manpages", "meta.lang": "^en$"}}
                ]
            },
            "zh": {
                "inputs": [
                    {
                        "path": PROSE,
                        "where": {"source": "manpages-zh|linux-doc", "meta.lang": "^zh$"},
                    }
                ]
            },
        },
    },
}


def _example(key: str, raw_dir: Path, out: Path) -> dict[str, Any]:
    """The demo config for `key` with input paths inside `raw_dir` and output `out`."""
    data = copy.deepcopy(EXAMPLES[key])
    sources = [s for spec in data.get("languages", {}).values() for s in spec["inputs"]]
    for source in [*data.get("inputs", []), *sources]:
        source["path"] = str(raw_dir / source["path"])
    if key != "lm":
        data["fasttext"] = dict(FASTTEXT)
    data["out"] = str(out)
    return data


def _reusable(directory: Path, kind: str) -> bool:
    if not (directory / "manifest.json").is_file():
        return False
    try:
        model_kind.open(directory, kind)
    except ArtifactError:
        return False
    return True


def build_demo_models(raw_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Train (or reuse) the demo's domain, quality and KenLM artifacts under `out_dir`."""
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    for key in ("domain", "quality"):
        target = out_dir / f"{key}-fasttext"
        if not _reusable(target, "fasttext-model"):
            shutil.rmtree(target, ignore_errors=True)
            data = _example(key, raw_dir, target)
            with recorded(["tests", f"({key} classifier)"]):
                train_classifier(parse_config(ClassifierConfig, data, f"classifier_{key}.yaml"))
        built[key] = target
    target = out_dir / "kenlm"
    if not _reusable(target, "kenlm-model"):
        shutil.rmtree(target, ignore_errors=True)
        data = _example("lm", raw_dir, target)
        with recorded(["tests", "(kenlm)"]):
            train_lm(parse_config(LanguageModelConfig, data, "lm.yaml"))
    built["lm"] = target
    return built


MODEL_STAGES = {"domain": "domain", "quality": "quality", "lm": "perplexity"}
"""build_demo_models() key -> the stage whose `model` setting takes that model artifact."""


def demo_config(raw: Path, out: Path, models: dict[str, Path]) -> PipelineConfig:
    """Every stage, with these models, small shards and 10% of the documents held out."""
    stages: dict[str, dict[str, Any]] = {}
    for name in registry():
        section: dict[str, Any] = {}
        for key, stage in MODEL_STAGES.items():
            if stage == name and key in models:
                section["model"] = str(models[key])
        if name in MODEL_STAGES.values() and "model" not in section:
            continue  # a model stage without its model cannot run
        stages[name] = section
    return PipelineConfig(
        inputs=(str(raw),),
        output=str(out),
        stages=stages,
        shard_rows=500,
        overwrite=True,
        eval_fraction=0.1,
    )
