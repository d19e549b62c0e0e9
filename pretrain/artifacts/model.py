"""`fasttext-model` (`model.bin` or `.ftz`) and `kenlm-model` (`<lang>.arpa` per language): each
with `model.json`, read as `info`; a shards manifest records the models' sha256 under `models`."""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError
from pretrain.manifest import load_manifest

FASTTEXT_KIND = "fasttext-model"
KENLM_KIND = "kenlm-model"
KINDS = (FASTTEXT_KIND, KENLM_KIND)
INFO_FILE = "model.json"


class ModelFields(base.Fields):
    """What a model manifest records: `model`, the figures `pretrain show` prints (the model
    file's sha256; fastText: name, labels, held-out accuracy; KenLM: per-language sha256, order)."""

    model: dict[str, Any] = Field(default_factory=dict)


class FasttextFields(ModelFields):
    KIND: ClassVar[str] = FASTTEXT_KIND


class KenlmFields(ModelFields):
    KIND: ClassVar[str] = KENLM_KIND


class Model(base.Artifact[ModelFields]):
    """A verified model artifact; `.info` is its model.json."""

    @cached_property
    def info(self) -> dict[str, Any]:
        return dict(json.loads(self.path(INFO_FILE).read_text(encoding="utf-8")))


def open(
    directory: str | os.PathLike, kind: str | None = None, *, full: bool | None = None
) -> Model:
    """Verify a model artifact of `kind` (either model kind when None)."""
    found = kind or load_manifest(directory)["kind"]
    if found not in KINDS:
        raise ArtifactError(
            f"{directory} is a {found!r} artifact, not a model ({', '.join(KINDS)}); "
            "pass a directory `pretrain data train-lm` or `train-classifier` wrote"
        )
    return Model.open(directory, kind=found, full=full)
