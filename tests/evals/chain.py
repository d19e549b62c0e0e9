"""A small real artifact chain for the end-to-end evals tests: synthetic tagged shards (prose and
code, 10% eval split) -> BPE tokenizer (vocab 400) -> encoded .bin/.idx -> base mixture config ->
decontaminated eval sets. Everything is built by the project's own commands' functions."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

PROSE = [
    "the",
    "river",
    "rose",
    "in",
    "the",
    "night",
    "and",
    "the",
    "farmers",
    "moved",
    "the",
    "cattle",
    "to",
    "the",
    "ridge",
    "before",
    "the",
    "roads",
    "closed",
    "and",
    "the",
    "rain",
    "kept",
    "falling",
    "on",
    "the",
    "fields",
    "of",
    "the",
    "valley",
]
CODE = [
    "def add(a, b):",
    "    return a + b",
    "for i in range(10):",
    "    total += i",
    "import numpy as np",
    "x = np.zeros(3)",
    "if x is None:",
    "    raise ValueError(x)",
    "class Point:",
    "    def __init__(self, x):",
    "        self.x = x",
    "print(total)",
]
TINY_PROXY = {
    "model.num_layers": 1,
    "model.hidden_size": 32,
    "model.num_attention_heads": 2,
    "model.num_query_groups": 1,
    "model.ffn_hidden_size": 64,
    "model.seq_length": 64,
    "model.make_vocab_size_divisible_by": 64,
    "batch.micro_batch_size": 4,
    "batch.global_batch_size": 4,
    "optim.lr": 0.01,
    "optim.warmup_steps": 0,
    "metrics.trackers": [],
    "metrics.peak_flops": 1e11,
}


def records(count: int = 240, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 2:
            text = "\n".join(rng.choice(CODE) for _ in range(rng.randint(6, 14)))
            out.append({"id": f"code-{i}", "text": text, "domain": "code", "lang": "en"})
        else:
            text = " ".join(rng.choice(PROSE) for _ in range(rng.randint(40, 90))) + "."
            out.append({"id": f"prose-{i}", "text": text, "domain": "prose", "lang": "en"})
    return out


def build_chain(root: Path) -> dict[str, Path]:
    from evals.sets import EvalBuildConfig, build_eval_sets
    from tests.tokenizer.synthetic import write_shards
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.encode import encode
    from tokenizer.train import train

    shards = write_shards(root / "shards", records(), docs_per_shard=120, eval_fraction=0.1)
    tokenizer = root / "tokenizer"
    train(TokenizerTrainConfig(data=str(shards), out=str(tokenizer), vocab_size=400))
    encoded = root / "encoded"
    encode(tokenizer, shards, encoded, backend="inline")
    evalsets = root / "evalsets"
    build_eval_sets(EvalBuildConfig(shards=str(shards), out=str(evalsets), min_docs_per_set=2))
    mixture = {
        "recipe": {
            "name": "prose-code",
            "components": [
                {"name": "prose", "select": {"domain": "prose"}, "weight": 0.8, "max_epochs": 50},
                {"name": "code", "select": {"domain": "code"}, "weight": 0.2, "max_epochs": 50},
            ],
        },
        "build": {
            "encoded": str(encoded),
            "tokenizer": str(tokenizer),
            "total_tokens": 20000,
            "seq_length": 64,
            "global_batch": 4,
            "seed": 1,
        },
        "out": str(root / "mixture"),
    }
    (root / "mixture.yaml").write_text(yaml.safe_dump(mixture))
    train_template = {
        "run": {"kind": "proxy", "train_steps": 10},
        "model": {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "seq_length": 64},
        "checkpoint": {"every": 5},
        "data": {"source": "mixture"},
    }
    (root / "train_proxy.yaml").write_text(yaml.safe_dump(train_template))
    return chain_paths(root)


def chain_paths(root: Path) -> dict[str, Path]:
    """What build_chain(root) made."""
    names = ("shards", "tokenizer", "encoded", "evalsets")
    return {
        **{name: root / name for name in names},
        "mixture_config": root / "mixture.yaml",
        "train": root / "train_proxy.yaml",
    }
