"""`tokenizer-eval` (`pretrain tokenizer eval`): a tokenizer's compression and round-trip report.

`report.json` (ours and the SentencePiece baseline per domain/language group) and
`compression.png`; the manifest repeats the headline figures under `summary`.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "tokenizer-eval"
REPORT_FILE = "report.json"


class TokenizerEvalFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    summary: dict[str, Any] = Field(default_factory=dict)
    """bytes_per_token, baseline_bytes_per_token, roundtrip_exact, eval_source."""


class TokenizerEvalManifest(TokenizerEvalFields, base.Manifest):
    """A tokenizer-eval artifact's manifest, as `open` reads it."""


write = base.Writer(TokenizerEvalFields)
"""Write a tokenizer-eval manifest once report.json is written (`pretrain tokenizer eval`)."""


class TokenizerEval(base.Artifact[TokenizerEvalManifest]):
    """A verified tokenizer-eval artifact."""


def open(directory: str | os.PathLike, *, full: bool | None = None) -> TokenizerEval:
    root, manifest, raw = base.verified(directory, TokenizerEvalManifest, full=full)
    return TokenizerEval(root, manifest, raw)
