"""The perplexity global stage: real KenLM scoring, CCNet buckets from a mergeable sketch, and the
same tags from the in-process path and the Ray Dataset path."""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from data_pipeline.cli import train_lm
from data_pipeline.fingerprint import model_hashes
from data_pipeline.stages.base import MapOutput
from data_pipeline.stages.perplexity import LogHistogramSketch, PerplexityStage
from data_pipeline.stages.registry import schema_for
from pretrain.errors import ArtifactError, ConfigError, SchemaError
from pretrain.manifest import manifest_sha256
from pretrain.sample import sample_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ppl")
    data = yaml.safe_load((REPO / "configs" / "lm.yaml").read_text())
    for spec in data["languages"].values():
        for source in spec["inputs"]:
            source["path"] = str(sample_dir() / Path(source["path"]).name)
    data.update(order=3, max_tokens=40_000, out=str(root / "lm"))
    (root / "lm.yaml").write_text(yaml.safe_dump(data))
    train_lm(argparse.Namespace(config=str(root / "lm.yaml"), overrides=[], dry_run=False))
    return root / "lm"


@pytest.fixture(scope="module")
def corpus() -> pa.Table:
    """The sample's prose (en, zh, one ja, hand-written cases without lang) as a langid table."""
    with gzip.open(sample_dir() / "prose.jsonl.gz", "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    rows.append({"id": "empty-en", "text": "", "meta": {"lang": "en"}, "source": "test"})
    n = len(rows)
    return pa.Table.from_pydict(
        {
            "id": [r["id"] for r in rows],
            "text": [r["text"] for r in rows],
            "url": [None] * n,
            "source": [r["source"] for r in rows],
            "meta": [None] * n,
            "split": ["train"] * n,
            "lang": [r["meta"].get("lang") for r in rows],
            "lang_score": [0.9] * n,
            "langid_reason": [None] * n,
        },
        schema=schema_for(["langid"]),
    )


def _stage(lm_dir: Path, **config) -> PerplexityStage:
    return PerplexityStage(PerplexityStage.Config(model=str(lm_dir), **config))


def _tag(stage: PerplexityStage, table: pa.Table, tmp: Path) -> pa.Table:
    """`table` as one part through the runner's map -> aggregate -> join, in-process."""
    tables, _ = stage.map_part(table)
    pq.write_table(tables["sketch"], tmp / "sketch.pq")
    (args,) = stage.aggregate([MapOutput("a-00000", files={"sketch": str(tmp / "sketch.pq")})])
    return stage.join_part(table, tables, 0, *args)


@pytest.mark.timeout(120)
def test_buckets_follow_per_language_percentiles(lm_dir, corpus, tmp_path):
    stage = _stage(lm_dir)
    out = _tag(stage, corpus, tmp_path)
    declared = schema_for(["langid", "perplexity"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    assert out.column("id").equals(corpus.column("id"))
    rows = out.select(["id", "lang", "perplexity", "ppl_bucket"]).to_pylist()
    assert set(stage.cutoffs) == {"en", "zh"}
    for lang in ("en", "zh"):
        scored = [r for r in rows if r["lang"] == lang and r["perplexity"] is not None]
        share = {
            b: sum(r["ppl_bucket"] == b for r in scored) / len(scored)
            for b in ("head", "middle", "tail")
        }
        assert share["head"] == pytest.approx(0.3, abs=0.02), share
        assert share["middle"] == pytest.approx(0.3, abs=0.02), share
        low, high = stage.cutoffs[lang]
        assert max(r["perplexity"] for r in scored if r["ppl_bucket"] == "head") <= low
        assert min(r["perplexity"] for r in scored if r["ppl_bucket"] == "tail") > high
        assert stage.counts[lang] == len(scored)
    unscored = [r for r in rows if r["lang"] not in ("en", "zh") or r["id"] == "empty-en"]
    assert unscored and all(r["perplexity"] is None and r["ppl_bucket"] == "none" for r in unscored)
    by_id = {r["id"]: r for r in rows}
    garbled = next(r["id"] for r in corpus.to_pylist() if r["source"] == "hand:garbled")
    assert by_id[garbled]["ppl_bucket"] in ("tail", "none")


@pytest.mark.timeout(60)
def test_manifest_records_cutoffs_and_model_hashes(lm_dir, corpus, tmp_path):
    stage = _stage(lm_dir, percentiles=(20, 80))
    _tag(stage, corpus, tmp_path)
    cutoffs = stage.manifest_section().ppl_cutoffs
    assert cutoffs == stage.cutoffs and cutoffs
    assert all(low < high for low, high in cutoffs.values())
    assert model_hashes([stage]) == {"perplexity.model": manifest_sha256(lm_dir)}
    assert stage.describe()["scored_documents"] == stage.counts


@pytest.mark.timeout(60)
def test_fixed_cutoffs_bucket_a_new_batch_like_the_reference_run(lm_dir, corpus, tmp_path):
    reference = _stage(lm_dir)
    _tag(reference, corpus, tmp_path)
    batch = corpus.slice(0, 40)  # a small new batch: its own percentiles would differ
    fixed = _stage(lm_dir, cutoffs=reference.cutoffs)
    out = _tag(fixed, batch, tmp_path)
    assert fixed.cutoffs["en"] == reference.cutoffs["en"]
    low, high = reference.cutoffs["en"]
    for value, lang, bucket in zip(
        out.column("perplexity").to_pylist(),
        out.column("lang").to_pylist(),
        out.column("ppl_bucket").to_pylist(),
        strict=True,
    ):
        if lang == "en" and value is not None:
            want = "head" if value <= low else "middle" if value <= high else "tail"
            assert bucket == want


@pytest.mark.timeout(30)
def test_sketch_is_accurate_and_merge_order_free():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(5, 1.2, 20_000))
    whole = LogHistogramSketch()
    whole.add("en", values)
    for q in (0.1, 0.3, 0.6, 0.9):
        exact = np.quantile(values, q)
        assert whole.quantile("en", q) == pytest.approx(exact, rel=0.005)
    parts = np.array_split(values, 7)
    for seed in range(3):
        order = list(range(7))
        random.Random(seed).shuffle(order)
        merged = LogHistogramSketch()
        for i in order:
            partial = LogHistogramSketch()
            partial.add("en", parts[i])
            merged.add_table(partial.table())  # as aggregate merges the parts' sketches
        assert np.array_equal(merged.counts["en"], whole.counts["en"])
        assert merged.quantile("en", 0.3) == whole.quantile("en", 0.3)
    assert whole.counts["en"].nbytes == 8 * 8000  # bounded: independent of the 20k values
    assert whole.quantile("zh", 0.3) is None


@pytest.mark.timeout(60)
def test_missing_model_lang_column_and_bad_percentiles_are_user_errors(lm_dir, corpus, tmp_path):
    with pytest.raises(ConfigError, match="train-lm"):
        _tag(PerplexityStage(), corpus, tmp_path)
    with pytest.raises(
        ArtifactError, match="does not exist; build it with `pretrain data train-lm"
    ):
        PerplexityStage(PerplexityStage.Config(model="/nonexistent/lm")).setup()
    with pytest.raises(SchemaError, match="langid"):
        _tag(_stage(lm_dir), corpus.drop_columns(["lang"]), tmp_path)
    from pretrain.config import parse_config

    with pytest.raises(ConfigError, match="percentiles"):
        parse_config(PerplexityStage.Config, {"percentiles": [60, 30]})
    with pytest.raises(ConfigError, match="cutoffs.en"):
        parse_config(PerplexityStage.Config, {"cutoffs": {"en": [50.0, 20.0]}})


def test_no_scorable_document_gives_no_cutoffs_and_bucket_none(lm_dir, corpus, tmp_path):
    """Every document rejected upstream (no text) or none at all: the global step still runs."""
    stage = _stage(lm_dir)
    empty = _tag(stage, corpus.slice(0, 0), tmp_path)
    assert empty.num_rows == 0 and "ppl_bucket" in empty.column_names
    nulls = corpus.set_column(1, "text", pa.nulls(len(corpus), pa.string()))
    tagged = _tag(stage, nulls, tmp_path)
    assert set(tagged.column("ppl_bucket").to_pylist()) == {"none"} and stage.cutoffs == {}


def test_worker_budget_the_models_cannot_fit_is_refused_before_any_work(lm_dir, monkeypatch):
    """The stage reads ray.worker_memory_mb: its loaded models count against it (the corpus does
    not: a worker holds one part, the driver one bounded sketch; bench_perplexity_memory)."""
    from data_pipeline.runner import preflight
    from data_pipeline.stages import perplexity

    files = json.loads((lm_dir / "model.json").read_text())["languages"].values()
    arpa_mb = sum((lm_dir / entry["file"]).stat().st_size for entry in files) / 2**20
    roomy = PerplexityStage(PerplexityStage.Config(model=str(lm_dir)), worker_memory_mb=2048)
    need = roomy.worker_memory_mb()
    assert need == pytest.approx(
        perplexity.WORKER_BASE_MB + perplexity.MODEL_RESIDENT_FACTOR * arpa_mb
    )
    roomy.check()
    tight = PerplexityStage(PerplexityStage.Config(model=str(lm_dir)), worker_memory_mb=int(need))
    with pytest.raises(ConfigError, match=f"raise the budget to at least {need:.0f}"):
        tight.check()
    # the runner hands the stage the job's budget: a model too big for it stops the preflight
    from data_pipeline.config import PipelineConfig

    config = PipelineConfig(
        inputs=[str(sample_dir() / "prose.jsonl.gz")],
        output=str(lm_dir.parent / "out"),
        stages={"extract": {}, "perplexity": {"model": str(lm_dir)}},
        ray={"worker_memory_mb": 2048},
    )
    preflight(config)
    monkeypatch.setattr(perplexity, "MODEL_RESIDENT_FACTOR", 4096 / arpa_mb)
    with pytest.raises(ConfigError, match="ray.worker_memory_mb=2048"):
        preflight(config)
