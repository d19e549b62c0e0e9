"""Two clean `pretrain demo` runs lock the same tokenizer: the demo's own sample -> pipeline (its
fastText/KenLM models trained in the run) -> tokenizer steps, each from clean in its own process
and output directory, give the same tokenizer id. Before lock v3 the id hashed the shards
manifest, whose created_unix and command differ on every run, so no two demos agreed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest, manifest_sha256

SCRIPT = """
import sys
from pathlib import Path
from data_pipeline import demo as pipeline
from pretrain_app.demo import DemoContext, sample_step
from tokenizer.config import TokenizerTrainConfig
from tokenizer.demo import DEMO_SAMPLE_BYTES, DEMO_VOCAB
from tokenizer.train import train

ctx = DemoContext(out=Path(sys.argv[1]))
sample_step(ctx)
pipeline.step(ctx)
config = TokenizerTrainConfig(
    data=str(ctx.artifacts["shards"]),
    out=str(ctx.out / "tokenizer"),
    vocab_size=DEMO_VOCAB,
    sample={"max_bytes": DEMO_SAMPLE_BYTES},
)
train(config)
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))}


def _demo_tokenizer(out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return load_manifest(out / "tokenizer")["tokenizer"]


@pytest.mark.slow
@pytest.mark.timeout(3200)
def test_two_clean_demos_lock_the_same_tokenizer(tmp_path: Path) -> None:
    first, second = _demo_tokenizer(tmp_path / "a"), _demo_tokenizer(tmp_path / "b")
    shards = [tmp_path / d / "shards" for d in ("a", "b")]
    assert manifest_sha256(shards[0]) != manifest_sha256(shards[1])  # built at different times
    assert first["id"] == second["id"] and first["sha256"] == second["sha256"]
    locks = [json.loads((tmp_path / d / "tokenizer" / "lock.json").read_text()) for d in "ab"]
    assert locks[0] == locks[1]
