"""Item 1 of issue 12: the default pipeline (dedup on) runs on any input size.

Every dedup hash partition that receives no document (1, 2 or 5 documents, every document
rejected, 512 partitions for 10 documents) must still produce the tags: exit 0, ledger balanced,
dedup tags on every kept row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.dedup import tasks
from data_pipeline.dedup.config import DedupConfig
from pretrain_app.cli import main

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(300)]

_VOCAB = (
    "river mill children water wheel miller sacks grain door market bread stone bridge lantern "
    "orchard harvest winter kettle garden letter window candle valley forest meadow shepherd "
    "harbour sailor anchor compass tide storm cellar ladder roof chimney parish bell tower clock"
)
WORDS = _VOCAB.split(" ")


def prose(seed: int, words: int = 60) -> str:
    """A distinct English-like document per seed (no two seeds are near duplicates)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def _jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def _run(tmp_path: Path, source: Path, *sets: str) -> tuple[int, dict, list]:
    out = tmp_path / "out"
    argv = ["data", "run", str(REPO / "configs" / "pipeline.yaml")]
    for item in (f"inputs=[{source}]", f"output={out}", *sets):
        argv += ["--set", item]
    code = main(argv)
    ledger = json.loads((out / "ledger.json").read_text()) if code == 0 else {}
    rows = [
        row
        for p in sorted((out / "data").glob("*.parquet"))
        for row in pq.read_table(p).to_pylist()
    ]
    return code, ledger, rows


@pytest.mark.ray
@pytest.mark.parametrize(
    "count", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(5, marks=pytest.mark.slow)]
)
def test_default_config_on_tiny_inputs(ray_local, tmp_path: Path, count: int) -> None:
    source = _jsonl(tmp_path / "tiny.jsonl", [{"text": prose(i)} for i in range(count)])
    code, ledger, rows = _run(tmp_path, source)
    assert code == 0
    assert ledger["conservation"]["balanced"] and ledger["documents_in"] == count
    assert len(rows) == count
    assert [(r["dup_keep"], r["dup_cluster_size"]) for r in rows] == [(True, 1)] * count


@pytest.mark.ray
@pytest.mark.slow
def test_every_document_rejected(ray_local, tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "bad.jsonl", [{"text": "   "}, {"id": 3}, {"text": 7}])
    code, ledger, rows = _run(tmp_path, source)
    assert code == 0 and rows == []
    assert ledger["documents_in"] == 3 and ledger["documents_dropped"] == 3
    assert ledger["conservation"]["balanced"]


@pytest.mark.ray
@pytest.mark.slow
def test_far_more_partitions_than_documents(ray_local, tmp_path: Path) -> None:
    docs = [{"text": prose(i)} for i in range(8)] + [{"text": prose(0)}] * 2
    source = _jsonl(tmp_path / "ten.jsonl", docs)
    code, ledger, rows = _run(tmp_path, source, "stages.dedup.num_partitions=512")
    assert code == 0 and ledger["conservation"]["balanced"] and len(rows) == 10
    copies = [r for r in rows if r["text"] == prose(0)]
    assert sorted(r["dup_keep"] for r in copies) == [False, False, True]
    assert {r["dup_cluster_size"] for r in copies} == {3}


def test_every_dedup_step_accepts_a_partition_without_documents() -> None:
    """In process, no Ray: one document over 4 partitions leaves 3 partitions empty; each step
    of the shuffle runs on them and the document still gets its tags."""
    config = DedupConfig()
    partitions = 4
    block = pa.table({"id": ["only"], "text": [prose(1)]})
    out = tasks.scatter_map(*tasks.map_tables(block, config), 0, partitions)
    bands, exact, docs, signed = (out[k * partitions : (k + 1) * partitions] for k in range(4))
    assert sum(d.num_rows for d in docs) == 1 and any(d.num_rows == 0 for d in docs)
    assert sum(d.num_rows for d in signed) == 1 and any(d.num_rows == 0 for d in signed)
    edges = []
    for p in range(partitions):
        buckets = tasks.bucket_edges(config, partitions, bands[p], exact[p])
        edges += buckets[partitions : 2 * partitions]
        attached = tasks.attach_u(config, partitions, buckets[p], signed[p])
        edges += tasks.verify_v(config, partitions, attached[p], signed[p])[:partitions]
    labelled = [tasks.label_docs(partitions, [], docs[q]) for q in range(partitions)]
    kept = [
        tasks.keep_clusters(partitions, [labelled[q][r] for q in range(partitions)])
        for r in range(partitions)
    ]
    tagged = tasks.attach(block, 0, *[k[0] for k in kept])
    assert tagged.column("dup_keep").to_pylist() == [True]
    assert tagged.column("dup_cluster_size").to_pylist() == [1]
    assert all(e.num_rows == 0 for e in edges)
