"""The training ids a mixture excludes for `build.decontaminate`: read from `evalset` artifacts.

`pretrain eval build` (evals/sets.py) writes `CONTAMINATED_FILE` with a `train_id` column: the
training documents it found to be near-copies of eval documents or to hold a task example's
text. The mixture build reads it here, so mixtures depends on the file it consumes, not on the
evals package that writes it.
"""

from __future__ import annotations

from pathlib import Path

from pretrain.artifacts import evalset
from pretrain.artifacts.evalset import CONTAMINATED_FILE

__all__ = ["CONTAMINATED_FILE", "contaminated_ids"]


def contaminated_ids(evalset_dir: str | Path) -> set[str]:
    """Training document ids a mixture must exclude to keep this eval set held out."""
    return evalset.open(evalset_dir).contaminated_ids()
