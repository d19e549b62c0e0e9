"""The demo's model assets: trained from the sample copies, usable by the three stages, reused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from data_pipeline.stages.classify import DomainStage, QualityStage
from data_pipeline.stages.perplexity import PerplexityStage
from data_pipeline.stages.registry import schema_for
from pretrain.manifest import manifest_sha256, verify
from tests.sample_models import build_demo_models


@pytest.mark.timeout(240)
def test_demo_models_build_tag_and_are_reused(demo_models):
    raw, models = demo_models  # tests/conftest.py: build_demo_models on the sample's files
    assert set(models) == {"domain", "quality", "lm"}
    kinds = {"domain": "fasttext-model", "quality": "fasttext-model", "lm": "kenlm-model"}
    hashes = {}
    for key, directory in models.items():
        assert verify(directory)["kind"] == kinds[key]
        hashes[key] = manifest_sha256(directory)

    texts = [
        "def main(argv):\n    return parse(argv)\n\nif __name__ == '__main__':\n    main()\n",
        "The kernel schedules tasks on each CPU and balances load between run queues.\n",
        "我们 的 内核 文档 说明 了 调度 器 的 工作 原理。\n",
        "",
    ]
    n = len(texts)
    table = pa.Table.from_pydict(
        {
            "id": [f"d{i}" for i in range(n)],
            "text": texts,
            "url": [None] * n,
            "source": ["t"] * n,
            "meta": [None] * n,
            "split": ["train"] * n,
            "lang": ["en", "en", "zh", "en"],
            "lang_score": [1.0] * n,
            "langid_reason": [None] * n,
        },
        schema=schema_for(["langid"]),
    )
    table = DomainStage(DomainStage.Config(model=str(models["domain"])))(table)
    table = QualityStage(QualityStage.Config(model=str(models["quality"])))(table)
    perplexity = PerplexityStage(PerplexityStage.Config(model=str(models["lm"])))
    scored = perplexity.score(table)  # the map side, then the cutoffs of this one part
    table = perplexity.bucket(scored, perplexity.set_cutoffs(perplexity.sketch_of(scored)))
    # base columns, then each stage's declared ones
    declared = schema_for(["langid", "domain", "quality", "perplexity"])
    assert (table.schema.names, table.schema.types) == (declared.names, declared.types)
    assert table.column("domain").to_pylist()[:2] == ["code", "prose"]
    assert table.column("ppl_bucket").to_pylist()[-1] == "none"
    assert all(p is not None for p in table.column("perplexity").to_pylist()[:3])

    again = build_demo_models(raw, models["lm"].parent)  # the same folder: reused as they are
    assert {k: manifest_sha256(v) for k, v in again.items()} == hashes
