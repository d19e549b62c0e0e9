"""Two clean `pretrain demo` runs lock the same tokenizer: the demo's own sample -> pipeline (its
fastText/KenLM models trained in the run) -> tokenizer steps, each from clean in its own process
and output directory, give the same tokenizer id. Before lock v3 the id hashed the shards
manifest, whose created_unix and command differ on every run, so no two demos agreed.

The two demos are the session's `clean_demos` (tests/conftest.py), shared with the ablation's
stability test: whole demos, so the tokenizer compared is the one the demo's later steps use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest, manifest_sha256


@pytest.mark.slow
@pytest.mark.timeout(5000)
@pytest.mark.xdist_group("clean_demos")  # one worker makes the two demos for both
def test_two_clean_demos_lock_the_same_tokenizer(clean_demos: tuple[Path, Path]) -> None:
    first, second = (load_manifest(out / "tokenizer")["tokenizer"] for out in clean_demos)
    shards = [out / "shards" for out in clean_demos]
    assert manifest_sha256(shards[0]) != manifest_sha256(shards[1])  # built at different times
    assert first["id"] == second["id"] and first["sha256"] == second["sha256"]
    locks = [json.loads((out / "tokenizer" / "lock.json").read_text()) for out in clean_demos]
    assert locks[0] == locks[1]
