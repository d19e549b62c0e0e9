"""`hf_export` (`pretrain export`): a checkpoint as a transformers LlamaForCausalLM
(`model.safetensors`, configs, tokenizer files), loadable with `from_pretrained(DIR)`."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, load_manifest, unlisted_files

KIND = "hf_export"


class ExportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    architecture: str = "LlamaForCausalLM"
    source: dict[str, Any] = Field(default_factory=dict)
    """The checkpoint exported: its path and step."""


class Export(base.Artifact[ExportFields]):
    """A verified export. transformers reads an export by directory, not by its manifest (an
    `added_tokens.json` changes the tokenizer), so `open` refuses a file the manifest does not
    list."""

    def check(self) -> None:
        extra = unlisted_files(self.directory, self.raw)
        if extra:
            raise ArtifactError(
                f"{self.directory} holds {', '.join(extra[:5])}, which its manifest does not "
                "list and transformers would read; remove it, or export again into an empty "
                "directory"
            )

    @property
    def step(self) -> int:
        return int(self.manifest.counts["step"])


open = Export.open


def is_export(directory: str | os.PathLike) -> bool:
    """True when `directory` holds a finished export (its manifest says so; not verified)."""
    path = os.fspath(directory)
    return os.path.isfile(os.path.join(path, MANIFEST)) and load_manifest(path)["kind"] == KIND
