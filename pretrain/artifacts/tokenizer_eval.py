"""`tokenizer-eval` (`pretrain tokenizer eval`): `report.json` (per domain/language group, with the
SentencePiece baseline), `compression.png`; the headline figures under `summary`."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "tokenizer-eval"


class TokenizerEvalFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    summary: dict[str, Any] = Field(default_factory=dict)
    """bytes_per_token, baseline_bytes_per_token, roundtrip_exact, eval_source."""


open = base.Artifact[TokenizerEvalFields].open
