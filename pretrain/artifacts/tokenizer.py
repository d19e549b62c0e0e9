"""`tokenizer` (`pretrain tokenizer train`): `tokenizer.json`, the HF side files and `lock.json`,
locked by content hash (`identity_of`, no timestamp in it: the same training gives the same id);
pretrain/CONTRACTS.md. The HF object: `tokenizer.lock.load_locked`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError, LockMismatch
from pretrain.manifest import canonical_json, sha256_bytes

KIND = "tokenizer"
LOCK_FILE = "lock.json"
TOKENIZER_FILE = "tokenizer.json"
TokenizerRef = base.TokenizerRef
"""What other artifacts record about a tokenizer (its identity)."""


def tokenizer_id(name: str, sha256: str) -> str:
    """The display identity, e.g. `bpe-32k@1f2e9c`."""
    return f"{name}@{sha256[:6]}"


def identity_of(files: Mapping[str, str]) -> str:
    """The tokenizer's identity: sha256 of its files' {name: sha256}, as its manifest lists them."""
    return sha256_bytes(canonical_json({"kind": KIND, "files": dict(sorted(files.items()))}))


class TokenizerFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    """Its identity (`identity_of` its files), name, display id, vocabulary size."""
    library: dict[str, str] = Field(default_factory=dict)
    """Versions of the libraries that trained it."""


class Tokenizer(base.Artifact[TokenizerFields]):
    """A verified tokenizer artifact; `.lock` is its lock.json, `.sha256` its identity."""

    def check(self) -> None:
        """Its identity is that of the files its manifest lists."""
        files = self.manifest.files
        for name in (TOKENIZER_FILE, LOCK_FILE):
            if name not in files:
                raise ArtifactError(
                    f"{self.directory}: its manifest lists no {name}; it is not a tokenizer: "
                    "train one with `pretrain tokenizer train`"
                )
        actual = identity_of({rel: entry.sha256 for rel, entry in files.items()})
        if actual != self.sha256:
            raise LockMismatch(
                f"{self.directory}: its files have identity {actual[:12]}..., the manifest "
                f"records {self.sha256[:12]}...: retrain with `pretrain tokenizer train`"
            )

    @property
    def sha256(self) -> str:
        return self.fields.tokenizer.sha256

    @cached_property
    def lock(self) -> dict[str, Any]:
        return dict(json.loads(self.path(LOCK_FILE).read_bytes()))

    @property
    def info(self) -> dict[str, Any]:
        """What other artifacts record about it (manifest field `tokenizer`)."""
        return self.fields.tokenizer.model_dump(exclude_none=True)


open = Tokenizer.open
