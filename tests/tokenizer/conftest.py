"""Fixtures for the tokenizer tests: a small synthetic `shards` artifact and a trained tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import built_once
from tests.tokenizer.synthetic import write_shards
from tests.tokenizer.tok_helpers import make_records, train_config


@pytest.fixture(scope="session")
def shards_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three shards (~600 documents), all pipeline stages' columns, 5% eval split."""

    def build(out: Path) -> None:
        write_shards(out, make_records(600), docs_per_shard=250)

    return built_once(tmp_path_factory, "tokenizer-shards", build)


@pytest.fixture(scope="session")
def tokenizer_dir(shards_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizer.train import train

    def build(base: Path) -> None:
        train(train_config(shards_dir, base / "tokenizer"))

    return built_once(tmp_path_factory, "tokenizer", build) / "tokenizer"
