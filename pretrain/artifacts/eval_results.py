"""`eval` (`pretrain eval run`): a run's checkpoints scored on an evalset.

`results.jsonl` (one line per checkpoint), `documents.parquet` (per-document scores),
`capability.png`. The manifest binds the evalset and tokenizer it used and repeats the last
checkpoint's metrics under `final`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "eval"


class EvalFields(base.Fields):
    KIND: ClassVar[str] = KIND
    evalset_sha256: str
    tokenizer_sha256: str
    final: dict[str, Any] = Field(default_factory=dict)
    skipped_checkpoints: list[dict[str, Any]] = Field(default_factory=list)
    """Checkpoints of the run that could not be loaded: step, checkpoint, reason."""


open = base.Artifact[EvalFields].open
