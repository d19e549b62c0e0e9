"""`encoded` (`pretrain tokenizer encode`): per prefix (tokenizer/prefixes.py) Megatron `.bin`/`.idx`
and a `.docs.parquet` sidecar whose row i is document i (`doc_index`, `id`, `num_tokens`, tags)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "encoded"
SIDECAR_SUFFIX = ".docs.parquet"
PREFIX_SUFFIXES = (".bin", ".idx", SIDECAR_SUFFIX)


class EncodedShard(base.Record):
    documents: int
    tokens: int
    split: str
    """`train` (no eval document) or `eval` (only `split == eval` documents)."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Source shard stem -> its sha256, in order."""


class EncodedFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    prefixes: list[str] = Field(default_factory=list)
    token_dtype: str = "uint16"
    eod_id: int | None = None
    shards: dict[str, EncodedShard] = Field(default_factory=dict)


class Encoded(base.Artifact[EncodedFields]):
    """A verified encoded artifact; `open` refuses a prefix not listed or not confined."""

    def check(self) -> None:
        self.prefix_paths()

    @property
    def tokenizer_sha256(self) -> str:
        return self.fields.tokenizer.sha256

    def prefix_paths(self) -> list[Path]:
        """Each prefix as a path (no suffix) whose `.bin`, `.idx` and sidecar are all listed
        among the artifact's files and confined to it."""
        paths = []
        for stem in self.fields.prefixes:
            for suffix in PREFIX_SUFFIXES:
                self.path(f"{stem}{suffix}")
            paths.append(self.directory / stem)
        return paths


open = Encoded.open
