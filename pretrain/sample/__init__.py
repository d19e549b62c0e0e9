"""The embedded sample (README.md here says what each file holds): what `make demo` (the README
walkthrough) and the tests run on, so nothing is downloaded."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SAMPLE_FILES = ("web.warc.gz", "prose.jsonl.gz", "code.parquet", "bad.jsonl")


def sample_dir() -> Path:
    return Path(str(resources.files("pretrain.sample")))
