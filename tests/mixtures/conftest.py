"""Fixtures: small synthetic `encoded` artifacts that follow pretrain/CONTRACTS.md exactly.

Each prefix is a real Megatron .bin/.idx written with IndexedDatasetBuilder (uint16 tokens, EOD
appended to every document) plus its `<stem>.docs.parquet` sidecar and an `encoded` manifest
naming the tokenizer. Token values encode (prefix, document, position) so tests can check that a
sample holds exactly the tokens of the documents it claims.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixtures import sampler
from pretrain.manifest import canonical_json, sha256_bytes, write_manifest
from tests.conftest import built_once

EOD = 0
TOKENIZER_SHA = sha256_bytes(b"synthetic tokenizer lock")
TOKENIZER = {"name": "bpe-test", "sha256": TOKENIZER_SHA, "id": f"bpe-test@{TOKENIZER_SHA[:6]}"}
DOMAINS = ("web", "code", "books")


def max_deviation(component: np.ndarray, weights: list[float] | np.ndarray, width: int) -> float:
    """The largest per-batch or batch-prefix deviation of any component (in sequences), as
    `pretrain mixture report` measures it."""
    counts = sampler.batch_counts(component, len(weights), width)
    return max(float(d.max(initial=0.0)) for d in sampler.batch_deviations(counts, weights, width))


def doc_tokens(prefix: int, doc: int, length: int) -> np.ndarray:
    """Body tokens (never EOD) unique to (prefix, doc) at each position; EOD last."""
    body = 1 + (prefix * 7919 + doc * 104729 + np.arange(length - 1)) % 60000
    return np.concatenate([body, [EOD]]).astype(np.uint16)


def _tags(rng: np.random.Generator, prefix: int, docs: int) -> dict[str, Any]:
    domain = [DOMAINS[(prefix + i) % 3] for i in range(docs)]
    quality = rng.uniform(0, 1, docs)
    return {
        "id": [f"p{prefix}-d{i}" for i in range(docs)],
        "source": [f"{d}/shard{prefix}.jsonl" for d in domain],
        "split": ["eval" if i % 17 == 5 else "train" for i in range(docs)],
        "domain": domain,
        "lang": ["de" if i % 5 == 0 else "en" for i in range(docs)],
        "quality_score": pa.array(quality, pa.float32()),
        "perplexity": pa.array(rng.uniform(10, 900, docs), pa.float32()),
        "ppl_bucket": [("head", "middle", "tail")[i % 3] for i in range(docs)],
        "unsafe_score": pa.array(rng.uniform(0, 0.2, docs), pa.float32()),
        "url_blocked": [i % 23 == 7 for i in range(docs)],
        "dup_keep": [i % 11 != 3 for i in range(docs)],
    }


def make_encoded(
    root: Path,
    prefixes: int = 3,
    docs: int = 60,
    seed: int = 0,
    min_len: int = 5,
    max_len: int = 120,
    tokenizer: dict | None = None,
) -> Path:
    """Write a synthetic encoded artifact under `root`; returns its directory."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    stems, total_tokens = [], 0
    for prefix in range(prefixes):
        stem = f"part-{prefix:05d}"
        lengths = rng.integers(min_len, max_len, docs)
        builder = IndexedDatasetBuilder(str(root / f"{stem}.bin"), dtype=np.uint16)
        for doc, length in enumerate(lengths):
            tokens = doc_tokens(prefix, doc, int(length))
            builder.add_document(tokens, [tokens.size])
        builder.finalize(str(root / f"{stem}.idx"))
        columns = {
            "doc_index": pa.array(np.arange(docs), pa.int64()),
            "num_tokens": pa.array(lengths, pa.int32()),
            **_tags(rng, prefix, docs),
        }
        pq.write_table(pa.table(columns), root / f"{stem}.docs.parquet")
        stems.append(stem)
        total_tokens += int(lengths.sum())
    write_manifest(
        root,
        "encoded",
        config={"synthetic": True},
        counts={"documents": prefixes * docs, "tokens": total_tokens},
        extra={"tokenizer": tokenizer or TOKENIZER, "prefixes": stems},
    )
    return root


def mixture_config(encoded: Path, out: Path, **build: Any) -> dict[str, Any]:
    """A three-component recipe over the synthetic tags (as a dict, for MixtureConfig)."""
    settings = {
        "encoded": str(encoded),
        "tokenizer_sha256": TOKENIZER_SHA,
        "total_tokens": 16 * 32 * 20,
        "seq_length": 32,
        "global_batch": 16,
        "seed": 7,
    }
    settings.update(build)
    return {
        "recipe": {
            "name": "test-mix",
            "components": [
                {
                    "name": "web",
                    "select": {"domain": "web", "lang": "en"},
                    "weight": 0.5,
                    "max_epochs": 4,
                },
                {"name": "code", "select": {"domain": "code"}, "weight": 0.3, "max_epochs": 4},
                {
                    "name": "books_hq",
                    "select": {"domain": "books", "quality_score": {"min": 0.3}},
                    "weight": 0.2,
                    "max_epochs": 4,
                },
            ],
        },
        "build": settings,
        "out": str(out),
    }


def config_hash(data: dict) -> str:
    return sha256_bytes(canonical_json(data))


@pytest.fixture(scope="session")
def encoded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "encoded", lambda base: make_encoded(base / "enc")) / "enc"
