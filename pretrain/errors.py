"""Errors a user can fix. Each prints as one line naming the field or file, the value and the fix.

Anything that is not a `PretrainError` is a bug and keeps its traceback.
"""

from __future__ import annotations

import re

_RAY_RETRY_NOTE = re.compile(
    r"\s*Failed to [^\n]{1,200}? after \d+/\d+ attempts \(total backoff [0-9.]+s\)\."
    r".*?if you believe this to be transient\.",
    re.S,
)
"""What Ray Data (2.60) appends to a map task's error, raised in a worker and rebuilt from its
message in the driver: advice on retrying, which a refusal is not."""


class PretrainError(Exception):
    """A user-fixable failure: the CLI prints its message on one line and exits 2."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(_RAY_RETRY_NOTE.sub("", message).split()))


class ConfigError(PretrainError):
    """A config file or `--set` override is invalid."""


class SchemaError(PretrainError):
    """A table does not match the document schema."""


class ArtifactError(PretrainError):
    """An artifact is missing, tampered with, or not the kind a command needs."""


class LockMismatch(ArtifactError):
    """Two artifacts name different tokenizer, mixture or data hashes."""


class InputError(PretrainError):
    """A raw input file cannot be read at all (not a per-document reject)."""


class GateRefused(PretrainError):
    """A full-size launch was not cleared by an ablation report."""


class OutputLocked(PretrainError):
    """Another live process (on this machine, or for an object store on any) writes the same
    output (pretrain.locking)."""
