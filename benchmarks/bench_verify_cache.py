"""Claim: with the project hash cache, a launch's byte-level check of a ~1 GB encoded set costs a
small fraction of re-hashing it, while a byte flipped at the same size is still caught.

Builds an `encoded` artifact of synthetic Megatron .bin/.idx files (default 8 x 128 MiB), a mixture
over it, then times the launcher's preflight (`trainer.launch.preflight`: the mixture and encoded
artifacts verified byte for byte, tokenizer/build pins) three ways, in this process (Python and
torch start-up are left out; they are reported apart as the CLI's `--dry-run` wall time):
- first: an empty hash cache, every file hashed (what the first launch on a machine pays);
- cached: the same check again (what every later launch pays);
- full: `PRETRAIN_VERIFY=full`, the baseline that ignores the cache (plain re-hash every launch).
The files were just written, so "first" and "full" read from the page cache: on a cold disk
they are slower still. Run: `.venv/bin/python -m benchmarks.bench_verify_cache [--mib 1024]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from benchmarks.common import write_result

TOKENIZER = {"name": "bench", "sha256": "b" * 64, "id": "bench@bbbbbb", "vocab_size": 60000}


def make_encoded(root: Path, mib: int, prefixes: int) -> Path:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    from pretrain.manifest import write_manifest

    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tokens_per_prefix = mib * 2**20 // 2 // prefixes
    doc_tokens, stems = 1 << 20, []
    for number in range(prefixes):
        stem = f"part-{number:05d}"
        builder = IndexedDatasetBuilder(str(root / f"{stem}.bin"), dtype=np.uint16)
        docs = tokens_per_prefix // doc_tokens
        for _ in range(docs):
            tokens = rng.integers(1, 60000, doc_tokens, dtype=np.uint16)
            tokens[-1] = 0
            builder.add_document(tokens, [tokens.size])
        builder.finalize(str(root / f"{stem}.idx"))
        table = {
            "doc_index": pa.array(np.arange(docs), pa.int64()),
            "num_tokens": pa.array([doc_tokens] * docs, pa.int32()),
            "id": [f"{stem}-{i}" for i in range(docs)],
            "split": ["train"] * docs,
            "domain": ["web"] * docs,
            "lang": ["en"] * docs,
            "source": ["bench"] * docs,
            "quality_score": pa.array([0.5] * docs, pa.float32()),
            "perplexity": pa.array([100.0] * docs, pa.float32()),
            "ppl_bucket": ["head"] * docs,
            "unsafe_score": pa.array([0.0] * docs, pa.float32()),
            "url_blocked": [False] * docs,
            "dup_keep": [True] * docs,
        }
        pq.write_table(pa.table(table), root / f"{stem}.docs.parquet")
        stems.append(stem)
    write_manifest(root, "encoded", extra={"tokenizer": TOKENIZER, "prefixes": stems})
    return root


def make_mixture(encoded: Path, out: Path) -> Path:
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config

    config = {
        "recipe": {
            "name": "bench",
            "components": [{"name": "web", "select": {"domain": "web"}, "weight": 1.0}],
        },
        "build": {
            "encoded": str(encoded),
            "tokenizer_sha256": TOKENIZER["sha256"],
            "total_tokens": 16 * 64 * 50,
            "seq_length": 64,
            "global_batch": 16,
        },
        "out": str(out),
    }
    build_mixture(parse_config(MixtureConfig, config))
    return out


def train_config(mixture: Path, run_dir: Path) -> dict[str, Any]:
    return {
        "run": {"out_dir": str(run_dir)},
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "ffn_hidden_size": 128,
            "seq_length": 64,
            "vocab_size": 60001,
        },
        "batch": {"micro_batch_size": 8, "global_batch_size": 16},
        "data": {"source": "mixture", "mixture_dir": str(mixture)},
    }


def timed_preflight(config: Any, mode: str) -> dict[str, float]:
    from pretrain.rayinit import environ
    from trainer.launch import preflight

    wall, cpu = time.perf_counter(), time.process_time()
    with environ(PRETRAIN_VERIFY=mode):
        preflight(config, None)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024, help="size of the encoded set")
    parser.add_argument("--prefixes", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    os.environ["PRETRAIN_CACHE"] = str(work / "cache")
    try:
        from pretrain.config import parse_config
        from trainer.config import TrainConfig

        encoded = make_encoded(work / "enc", args.mib, args.prefixes)
        mixture = make_mixture(encoded, work / "mix")
        data_bytes = sum(p.stat().st_size for p in encoded.iterdir())
        config = parse_config(TrainConfig, train_config(mixture, work / "run"))
        shutil.rmtree(work / "cache")  # the build filled it: start from what a new machine has
        first = timed_preflight(config, "cached")
        cached = timed_preflight(config, "cached")
        full = timed_preflight(config, "full")
        yaml_path = work / "train.yaml"
        yaml_path.write_text(yaml.safe_dump(train_config(mixture, work / "run")))
        start = time.perf_counter()
        cli = [sys.executable, "-m", "pretrain_app", "launch", str(yaml_path), "--dry-run"]
        subprocess.run(cli, check=True, capture_output=True, env=dict(os.environ))
        dry_run_wall = time.perf_counter() - start
        write_result(
            "verify_cache",
            {
                "encoded_bytes": data_bytes,
                "first_launch": first,
                "cached_launch": cached,
                "full_rehash_baseline": full,
                "speedup_cached_vs_full_wall": round(full["wall_s"] / cached["wall_s"], 1),
                "speedup_cached_vs_full_cpu": round(full["cpu_s"] / max(cached["cpu_s"], 1e-6), 1),
                "cli_dry_run_wall_s_cached": dry_run_wall,
                "machine_note": "2 cores shared by 8 engineers; page cache warm for first/full",
            },
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
