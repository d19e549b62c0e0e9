"""Small `shards` artifacts from records, following pretrain/CONTRACTS.md (tests, benchmarks).

Real shards come from `pretrain data run`; this writes the same layout (Parquet under `data/`, pretrain.shards_layout,
with `schema_for(stages)`, manifest kind `shards`) from records such as
`{"text", "domain", "lang", "source"}`, filling the tag columns of the chosen stages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data_pipeline.stages.registry import schema_for
from data_pipeline.stages.safety import pii_struct
from pretrain import shards_layout as layout
from pretrain.artifacts import shards as shards_kind
from pretrain.artifacts.base import write_artifact
from pretrain.provenance import recorded
from pretrain.schema import split_for

DEFAULT_STAGES = ("extract", "langid", "domain", "quality", "perplexity", "safety", "dedup")


def _unit(doc_id: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{salt}:{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _row(record: dict[str, Any], index: int, eval_fraction: float) -> dict[str, Any]:
    doc_id = record.get("id") or f"doc-{index:07d}"
    text = record["text"]
    perplexity = 50 + 900 * _unit(doc_id, "ppl")
    return {
        "id": doc_id,
        "text": text,
        "url": record.get("url"),
        "source": record.get("source", "synthetic"),
        "meta": None,
        "split": record.get("split") or split_for(doc_id, eval_fraction),
        "extract_reason": None,
        "extractor": "synthetic",
        "num_bytes": len(text.encode("utf-8")),
        "lang": record.get("lang"),
        "lang_score": 0.99,
        "langid_reason": None,
        "domain": record.get("domain"),
        "domain_score": 0.9,
        "quality_score": round(_unit(doc_id, "quality"), 4),
        "perplexity": perplexity,
        "ppl_bucket": "head" if perplexity < 350 else "middle" if perplexity < 650 else "tail",
        "url_blocked": False,
        "unsafe_score": round(_unit(doc_id, "unsafe") / 10, 4),
        "unsafe_categories": [],
        "pii_counts": pii_struct({}),
        "safety_reason": None,
        "exact_hash": hashlib.sha1(text.encode()).hexdigest(),
        "dup_cluster": index,
        "dup_keep": _unit(doc_id, "dup") > 0.1,
        "dup_cluster_size": 1,
    }


def write_shards(
    out: str | Path,
    records: Iterable[dict[str, Any]],
    *,
    docs_per_shard: int = 500,
    stages: Sequence[str] = DEFAULT_STAGES,
    eval_fraction: float = 0.05,
    stem: str = "synthetic",
) -> Path:
    """Write `out/data/<stem>-<part:05d>.parquet`, the dataset card and a `shards` manifest;
    return `out`."""
    out = Path(out)
    (out / layout.DATA_DIR).mkdir(parents=True, exist_ok=True)
    (out / layout.CARD).write_text(layout.dataset_card(), encoding="utf-8")
    schema = schema_for(stages)
    rows: list[dict[str, Any]] = []
    part = 0
    total = 0

    def flush() -> None:
        nonlocal part, rows
        table = pa.Table.from_pylist(
            [{n: r.get(n) for n in schema.names} for r in rows], schema=schema
        )
        pq.write_table(table, out / layout.data_file(f"{stem}-{part:05d}"), compression="zstd")
        part += 1
        rows = []

    for index, record in enumerate(records):
        rows.append(_row(record, index, eval_fraction))
        total += 1
        if len(rows) >= docs_per_shard:
            flush()
    if rows:
        flush()
    stage_info = [{"name": s, "version": 1, "config": {}} for s in stages]
    with recorded(["tests.tokenizer.synthetic.write_shards"]):
        write_artifact(
            out,
            shards_kind.ShardsFields(stages=stage_info, models={}),
            config={"synthetic": True, "stages": list(stages)},
            counts={"documents_in": total, "documents_kept": total},
        )
    return out
