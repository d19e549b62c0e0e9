"""Domain and quality tags from fastText classifiers trained by `pretrain data train-classifier`.

- `domain`: the domain model's most probable label and its probability (`domain_score`); or, with
  `field` instead of `model`, the label the input already carries (Dolma's `source`, RedPajama's
  `meta.redpajama_set_name`) mapped through `values`, score 1.0: a labelled corpus needs no model.
- `quality`: P(positive label) of a DCLM-style model (reference text vs random input).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from data_pipeline.fasttext_file import LABEL_PREFIX, check_fasttext_file, load_fasttext
from data_pipeline.normalization import NORMALIZATION, classifier_line
from data_pipeline.stages.base import Stage, StageConfig
from pretrain.artifacts import model as model_kind
from pretrain.errors import ArtifactError, ConfigError
from pretrain.nested import meta_value


class ClassifierStageConfig(StageConfig):
    model: str | None = None
    """Directory of a `fasttext-model` artifact (built by `pretrain data train-classifier`)."""


class DomainStageConfig(ClassifierStageConfig):
    field: str | None = None
    """Take the tag from this input field instead of a model: `source` or `url` (base columns),
    or the dotted path of a field the reader kept in `meta` (`meta.redpajama_set_name`,
    `metadata.domain`: a `meta` key)."""
    values: dict[str, str] = Field(default_factory=dict)
    """Input value -> domain tag (e.g. {RedPajamaGithub: code, RedPajamaArXiv: math})."""
    unmapped: str | None = None
    """The tag of a value `values` does not list; None: the value itself. A document without the
    field gets a null tag."""

    @model_validator(mode="after")
    def _one_source(self) -> DomainStageConfig:
        if self.field and self.model:
            raise ValueError(
                "set stages.domain.field (tag from an input field) or stages.domain.model "
                "(a classifier), not both"
            )
        return self


def field_values(batch: pa.Table, field: str) -> list[str | None]:
    """Each row's value of the dotted input `field` (DomainStageConfig.field), None where absent;
    a value that is not a string as its JSON text (`3`, `true`)."""
    if field in ("source", "url"):
        return batch.column(field).to_pylist()
    values: list[str | None] = []
    for entries in batch.column("meta").to_pylist():
        entry = next((e for e in entries or () if e["key"] == field), None)
        value = None if entry is None else meta_value(entry)
        values.append(value if value is None or isinstance(value, str) else json.dumps(value))
    return values


class _FastTextStage(Stage):
    """Shared loading, hashing and batch prediction for the two classifier stages."""

    task: ClassVar[str]
    Config = ClassifierStageConfig
    config: ClassifierStageConfig

    def __init__(self, config: StageConfig | None = None, **context: Any) -> None:
        super().__init__(config, **context)
        self._model: Any = None
        self._info: dict[str, Any] = {}

    def model_dir(self) -> Path:
        model = self.config.model
        if not model:
            raise ConfigError(
                f"stages.{self.name}.model is not set; build a {self.task} classifier with "
                f"`pretrain data train-classifier configs/classifier_{self.task}.yaml` and set "
                "its output directory"
            )
        if not Path(model).exists():
            raise ArtifactError(
                f"stages.{self.name}.model = {model!r}: that artifact does not exist; build it "
                f"with `pretrain data train-classifier configs/classifier_{self.task}.yaml` "
                "(set `out` to this path) or fix the path"
            )
        return Path(model)

    def models(self) -> dict[str, Path]:
        model = self.config.model
        return {"model": Path(model)} if model else {}

    def setup(self) -> None:
        self.check()
        self._model = load_fasttext(self.model_dir() / self._info["model_file"])

    def check(self) -> None:
        directory = self.model_dir()
        self._info = model_kind.open(directory, model_kind.FASTTEXT_KIND).info
        scheme = self._info.get("normalization", {}).get("scheme")
        if scheme != NORMALIZATION["scheme"]:
            raise ArtifactError(
                f"{directory} was trained with text scheme {scheme!r}, this code "
                f"tags with {NORMALIZATION['scheme']!r}; retrain the model"
            )
        if self.name == "quality" and not self._info.get("positive_label"):
            raise ArtifactError(
                f"{directory} has no positive_label in model.json; train the "
                "quality model with `positive_label` set (e.g. hq)"
            )
        check_fasttext_file(directory / self._info["model_file"])

    def predict(self, texts: list[str | None]) -> tuple[list[int], np.ndarray]:
        """(indices of rows with text, probability matrix rows x labels in `labels` order)."""
        if self._model is None:
            self.setup()
        labels = self._info["labels"]
        lines, index = [], []
        for i, text in enumerate(texts):
            line = classifier_line(text, self._info["max_chars"])
            if line:
                lines.append(line)
                index.append(i)
        probs = np.zeros((len(lines), len(labels)), dtype=np.float32)
        if lines:
            column = {f"{LABEL_PREFIX}{label}": j for j, label in enumerate(labels)}
            predicted, scores = self._model.predict(lines, k=len(labels))
            for row, (names, values) in enumerate(zip(predicted, scores, strict=True)):
                for name, value in zip(names, values, strict=True):
                    probs[row, column[name]] = value
        return index, np.clip(probs, 0.0, 1.0)


class DomainStage(_FastTextStage):
    """Tags `domain` (most probable label) and `domain_score` (its probability); with `field`,
    the input's own label mapped through `values` (score 1.0)."""

    name = "domain"
    order = 30
    columns = (pa.field("domain", pa.string()), pa.field("domain_score", pa.float32()))
    tags = ("domain",)
    task = "domain"
    Config = DomainStageConfig
    config: DomainStageConfig

    def setup(self) -> None:
        if not self.config.field:
            super().setup()

    def check(self) -> None:
        if not self.config.field:
            super().check()

    def models(self) -> dict[str, Path]:
        return {} if self.config.field else super().models()

    def __call__(self, batch: pa.Table) -> pa.Table:
        field = self.config.field
        if field:
            values, unmapped = self.config.values, self.config.unmapped
            raw = field_values(batch, field)
            tags = [
                None if v is None else values.get(v, v if unmapped is None else unmapped)
                for v in raw
            ]
            scores = [None if t is None else 1.0 for t in tags]
            return self.append(batch, {"domain": tags, "domain_score": scores})
        texts = batch.column("text").to_pylist()
        index, probs = self.predict(texts)
        labels = self._info["labels"]
        domain: list[str | None] = [None] * len(texts)
        score: list[float | None] = [None] * len(texts)
        best = probs.argmax(axis=1) if len(index) else np.zeros(0, dtype=int)
        for row, i in enumerate(index):
            domain[i] = labels[int(best[row])]
            score[i] = float(probs[row, best[row]])
        return self.append(batch, {"domain": domain, "domain_score": score})


class QualityStage(_FastTextStage):
    """Tags `quality_score` = P(positive label) in [0, 1]."""

    name = "quality"
    order = 40
    columns = (pa.field("quality_score", pa.float32()),)
    tags = ("quality_score",)
    task = "quality"

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        index, probs = self.predict(texts)
        column = self._info["labels"].index(self._info["positive_label"])
        score: list[float | None] = [None] * len(texts)
        for row, i in enumerate(index):
            score[i] = float(probs[row, column])
        return self.append(batch, {"quality_score": score})
