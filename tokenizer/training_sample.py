"""The tag-weighted training sample, streamed from shards. Pass 1 plans, per (domain, lang) group,
an inclusion probability `min(1, weight * scale)` whose `scale` makes the expected sample
`max_bytes`; pass 2 keeps a train-split document when a stable hash of (seed, id) falls below it
(the same sample in any shard order)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pretrain.progress import Progress
from tokenizer.config import SampleConfig
from tokenizer.shards import read_columns, tag, unit_hash

TAG_COLUMNS = ("id", "split", "domain", "lang")


def group_key(domain: Any, lang: Any) -> str:
    return f"{tag(domain)}/{tag(lang)}"


@dataclass
class SamplePlan:
    """Per group: bytes available (train split) and the inclusion probability."""

    available_bytes: dict[str, int]
    probability: dict[str, float]
    seed: int
    max_doc_chars: int
    realised: dict[str, dict[str, int]] = field(default_factory=dict)

    def composition(self) -> dict[str, Any]:
        """The realised sample: docs, bytes and share per group, as recorded in lock.json."""
        total = sum(g["bytes"] for g in self.realised.values()) or 1
        groups = {
            key: {
                "documents": self.realised.get(key, {}).get("documents", 0),
                "bytes": self.realised.get(key, {}).get("bytes", 0),
                "share": round(self.realised.get(key, {}).get("bytes", 0) / total, 6),
                "available_bytes": self.available_bytes[key],
                "inclusion_probability": round(self.probability[key], 6),
            }
            for key in sorted(self.available_bytes)
        }
        return {
            "documents": sum(g["documents"] for g in groups.values()),
            "bytes": sum(g["bytes"] for g in groups.values()),
            "groups": groups,
        }


def _weight(config: SampleConfig, key: str) -> float:
    domain, _, lang = key.partition("/")
    return config.domain_weights.get(domain, config.default_weight) * config.lang_weights.get(
        lang, config.default_weight
    )


def _solve_scale(weighted: dict[str, tuple[float, int]], budget: int) -> float:
    """The scale s with sum_g min(1, w_g s) B_g = budget (bisection; inf when all fit)."""
    total = sum(b for w, b in weighted.values() if w > 0)
    if total <= budget:
        return float("inf")
    low, high = 0.0, 1.0
    while sum(min(1.0, w * high) * b for w, b in weighted.values()) < budget:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        if sum(min(1.0, w * mid) * b for w, b in weighted.values()) < budget:
            low = mid
        else:
            high = mid
    return high


def plan_sample(shards: list[Path], config: SampleConfig) -> SamplePlan:
    """Pass 1: bytes per (domain, lang) group of the train split, then the probabilities."""
    available: dict[str, int] = {}
    for path in Progress(shards, desc="tokenizer sample: sizes", unit="shard", leave=False):
        for table in read_columns(path, (*TAG_COLUMNS, "num_bytes")):
            rows = zip(
                table.column("split").to_pylist(),
                table.column("domain").to_pylist(),
                table.column("lang").to_pylist(),
                table.column("num_bytes").to_pylist(),
                strict=True,
            )
            for split, domain, lang, size in rows:
                if split == "eval":
                    continue
                key = group_key(domain, lang)
                available[key] = available.get(key, 0) + int(size or 0)
    weighted = {key: (_weight(config, key), size) for key, size in available.items()}
    scale = _solve_scale(weighted, config.max_bytes)
    probability = {key: min(1.0, w * scale) if w > 0 else 0.0 for key, (w, _) in weighted.items()}
    return SamplePlan(available, probability, config.seed, config.max_doc_chars)


def stream_sample(shards: list[Path], plan: SamplePlan) -> Iterator[list[str]]:
    """Pass 2: yield batches of sampled texts, recording the realised composition in `plan`."""
    plan.realised = {}
    batch: list[str] = []
    for path in Progress(shards, desc="tokenizer sample: text", unit="shard", leave=False):
        for table in read_columns(path, (*TAG_COLUMNS, "text")):
            columns = [table.column(c).to_pylist() for c in (*TAG_COLUMNS, "text")]
            for doc_id, split, domain, lang, text in zip(*columns, strict=True):
                if split == "eval" or not text:
                    continue
                key = group_key(domain, lang)
                if unit_hash(doc_id, plan.seed) >= plan.probability.get(key, 0.0):
                    continue
                text = text[: plan.max_doc_chars]
                stats = plan.realised.setdefault(key, {"documents": 0, "bytes": 0})
                stats["documents"] += 1
                stats["bytes"] += len(text.encode("utf-8"))
                batch.append(text)
                if len(batch) >= 256:
                    yield batch
                    batch = []
    if batch:
        yield batch
