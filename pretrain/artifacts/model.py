"""Model artifacts the pipeline's stages load: `fasttext-model` and `kenlm-model`.

fastText: one model file (`model.bin`, or quantized `model.ftz`) plus `model.json` (labels,
normalisation, training stats, held-out accuracy) and `heldout.png`. KenLM: one `<lang>.arpa` per
language plus `model.json` (`languages` map, normalisation, counts, discounts, held-out
perplexity). A shards manifest records each model's manifest sha256 under `models`.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError
from pretrain.manifest import require

FASTTEXT_KIND = "fasttext-model"
KENLM_KIND = "kenlm-model"
KINDS = (FASTTEXT_KIND, KENLM_KIND)
INFO_FILE = "model.json"


class ModelFields(base.Fields):
    """What a model manifest records: `model`, the figures `pretrain show` prints (the model
    file's sha256; fastText: name, labels, held-out accuracy; KenLM: per-language sha256, order)."""

    KIND: ClassVar[str] = ""
    model: dict[str, Any] = Field(default_factory=dict)


class FasttextFields(ModelFields):
    KIND: ClassVar[str] = FASTTEXT_KIND


class KenlmFields(ModelFields):
    KIND: ClassVar[str] = KENLM_KIND


write = base.Writer(ModelFields)
"""Write a model artifact's manifest once model.json is written: `FasttextFields`
(`pretrain data train-classifier`) or `KenlmFields` (`pretrain data train-lm`)."""


class ModelManifest(ModelFields, base.Manifest):
    KIND: ClassVar[str] = ""


class FasttextManifest(ModelManifest):
    KIND: ClassVar[str] = FASTTEXT_KIND


class KenlmManifest(ModelManifest):
    KIND: ClassVar[str] = KENLM_KIND


_MODELS: dict[str, type[ModelManifest]] = {
    FASTTEXT_KIND: FasttextManifest,
    KENLM_KIND: KenlmManifest,
}


class Model(base.Artifact[ModelManifest]):
    """A verified model artifact; `.info` is its model.json."""

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @cached_property
    def info(self) -> dict[str, Any]:
        return dict(json.loads(self.path(INFO_FILE).read_text(encoding="utf-8")))


def open(
    directory: str | os.PathLike, kind: str | None = None, *, full: bool | None = None
) -> Model:
    """Verify a model artifact of `kind` (either model kind when None)."""
    raw = require(directory, kind=kind, full=full)
    model = _MODELS.get(raw["kind"])
    if model is None:
        raise ArtifactError(
            f"{directory} is a {raw['kind']!r} artifact, not a model ({', '.join(KINDS)}); "
            "pass a directory `pretrain data train-lm` or `train-classifier` wrote"
        )
    root, manifest, raw = base.verified(directory, model, deep=False)
    return Model(root, manifest, raw)
