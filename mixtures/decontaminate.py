"""The training ids a mixture excludes for `build.decontaminate`: read from `evalset` artifacts.

`pretrain eval build` (evals/sets.py) writes `CONTAMINATED_FILE` with a `train_id` column: the
training documents it found to be near-copies of eval documents. The mixture build reads it here,
so mixtures depends on the file it consumes, not on the evals package that writes it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pretrain.manifest import listed_path, require

CONTAMINATED_FILE = "contaminated.parquet"


def contaminated_ids(evalset_dir: str | Path) -> set[str]:
    """Training document ids a mixture must exclude to keep this eval set held out."""
    manifest = require(evalset_dir, kind="evalset")
    path = listed_path(evalset_dir, manifest, CONTAMINATED_FILE)
    table = pq.read_table(path, columns=["train_id"])
    return set(table.column("train_id").to_pylist())
