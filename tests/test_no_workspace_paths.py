"""Nothing in the packages or benchmarks reads this workspace's ../shared (a user's clone has none):
inputs such as the development corpus are arguments (benchmarks: --corpus / PRETRAIN_CORPUS)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = (
    "pretrain_app",
    "pretrain",
    "data_pipeline",
    "tokenizer",
    "mixtures",
    "trainer",
    "evals",
    "benchmarks",
)
WORKSPACE_PATH = re.compile(r"\.\./shared\b|/work/shared\b|[\"']shared[\"']\s*/")


def test_no_package_or_benchmark_points_at_the_workspace() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in SCANNED
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if WORKSPACE_PATH.search(line)
    ]
    assert hits == []
