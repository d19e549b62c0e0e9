"""`eval` (`pretrain eval run`): `results.jsonl` (a line per checkpoint), `documents.parquet`,
`capability.png`; binds its evalset and tokenizer, the last checkpoint's metrics under `final`."""

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
