"""`hf_export` (`pretrain export`): a checkpoint as a Hugging Face transformers model.

`model.safetensors`, `config.json` (LlamaForCausalLM), `generation_config.json` and the tokenizer
files, loadable with `transformers.AutoModelForCausalLM.from_pretrained(DIR)`.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "hf_export"


class ExportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    tokenizer: base.TokenizerRef
    architecture: str = "LlamaForCausalLM"
    source: dict[str, Any] = Field(default_factory=dict)
    """The checkpoint exported: its path and step."""


class ExportManifest(ExportFields, base.Manifest):
    """An export's manifest, as `open` reads it."""


write = base.Writer(ExportFields)
"""Write an export's manifest once its files are written (`pretrain export`)."""


class Export(base.Artifact[ExportManifest]):
    """A verified export artifact."""

    @property
    def step(self) -> int:
        return int(self.manifest.counts["step"])


def open(directory: str | os.PathLike, *, full: bool | None = None) -> Export:
    """The verified export. transformers reads an export by directory, not by its manifest (an
    `added_tokens.json` changes the tokenizer), so a file the manifest does not list is refused."""
    from pretrain.errors import ArtifactError
    from pretrain.manifest import unlisted_files

    root, manifest, raw = base.verified(directory, ExportManifest, full=full)
    extra = unlisted_files(root, raw)
    if extra:
        raise ArtifactError(
            f"{root} holds {', '.join(extra[:5])}, which its manifest does not list and "
            "transformers would read; remove it, or export again into an empty directory"
        )
    return Export(root, manifest, raw)


def is_export(directory: str | os.PathLike) -> bool:
    """True when `directory` holds a finished export (its manifest says so; not verified)."""
    from pretrain.manifest import MANIFEST, load_manifest

    path = os.fspath(directory)
    return os.path.isfile(os.path.join(path, MANIFEST)) and load_manifest(path)["kind"] == KIND
