"""Helpers for the trainer tests: a tiny synthetic-data config and reading a run's losses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def tiny_config(run_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A 2-layer GQA/SwiGLU/RMSNorm/RoPE GPT on synthetic data; `sections` update the defaults."""
    config: dict[str, Any] = {
        "run": {"out_dir": str(run_dir), "train_steps": 6, "seed": 7},
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_query_groups": 2,
            "ffn_hidden_size": 128,
            "seq_length": 64,
            "make_vocab_size_divisible_by": 64,
        },
        "optim": {"lr": 3e-3, "warmup_steps": 1},
        "batch": {"micro_batch_size": 2, "global_batch_size": 4},
        "data": {
            "source": "synthetic",
            "synthetic_documents": 64,
            "synthetic_vocab": 128,
            "phases": [{"name": "main", "seq_length": 64}],
        },
        "checkpoint": {"every": 2, "keep_last": 3},
        "metrics": {"tensorboard": False, "peak_flops": 1e11},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def losses(run_dir: Path) -> dict[int, float]:
    """Loss per step from metrics.jsonl (the last record of a step wins, as after a resume)."""
    result: dict[int, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record and record.get("event") is None:
            result[record["step"]] = record["loss"]
    return result


def events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event")]
