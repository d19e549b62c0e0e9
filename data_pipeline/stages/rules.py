"""Rule signals: Gopher quality and repetition, C4 and FineWeb line rules, garbled and log-like text.

Every rule is a numeric column (RULES_COLUMNS); `rules_reason` names the
first failing clause. It is a SOFT tag: the job keeps the row and mixtures select on the signals.

Clause order (first failing wins): `empty`, `garbled_text`, `log_like`, then datatrove's chain
GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter -> FineWebQualityFilter, with
datatrove's default thresholds. Documents tagged with a code domain are judged by code clauses only
(StarCoder-style line length and alphanumeric share), never by prose rules.

Words: a compiled regex approximates spaCy's English tokenizer (what datatrove uses), about 20x
faster; `word_tokenizer: spacy` uses spaCy itself. With `script_aware` on, runs of CJK characters
are cut into 2-character pseudo-words, so a Chinese document's word count is its CJK characters / 2
(plus its non-CJK words); CJK documents skip the mean-word-length clause, leave full-width
punctuation out of the alphabetic-word share, use a Chinese stop-word list and CJK sentence
punctuation, and their characters count double for FineWeb's short lines.

Each document's signals are computed in a killable child process under `timeout_s` CPU-seconds
(data_pipeline.timelimit): a crafted line can make one regex call backtrack for a minute. Such a
document is tagged `timeout` with null signals; a crash in the child tags it `rules_failed`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from data_pipeline.stages.base import Stage, StageConfig
from data_pipeline.stages.rules_config import (  # noqa: F401  (re-exported)
    RULES_COLUMNS,
    C4Config,
    CodeConfig,
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    RulesConfig,
)
from data_pipeline.stages.rules_text import (  # noqa: F401  (re-exported)
    NGrams,
    document_signals,
    gopher_quality,
    gopher_repetition,
    is_cjk,
    make_tokenizer,
)
from data_pipeline.timelimit import DocumentFailed, DocumentWorker, TimeLimitExceeded


class RulesStage(Stage):
    """Appends Gopher / C4 / FineWeb / garbled / log-like signals and `rules_reason`."""

    name: ClassVar[str] = "rules"
    order: ClassVar[int] = 50
    columns: ClassVar[tuple[pa.Field, ...]] = RULES_COLUMNS
    version: ClassVar[int] = 1
    requires: ClassVar[tuple[str, ...]] = ("id", "text")
    Config: ClassVar[type[StageConfig]] = RulesConfig

    def setup(self) -> None:
        self._tokenizer = make_tokenizer(self.config.word_tokenizer)
        self._worker = DocumentWorker(
            document_rules,
            self.config,
            seconds=self.config.timeout_s,  # type: ignore[attr-defined]
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not hasattr(self, "_worker"):
            self.setup()
        texts = batch.column("text").to_pylist()
        langs = _optional_column(batch, "lang")
        domains = _optional_column(batch, "domain")
        names = [f.name for f in self.provided_fields()]
        columns: dict[str, list[Any]] = {name: [] for name in names}
        for text, lang, domain in zip(texts, langs, domains, strict=True):
            signals = self._limited(text or "", lang, domain)
            for name in names:
                columns[name].append(signals[name])
        return self.append(batch, columns)

    def _limited(self, text: str, lang: str | None, domain: str | None) -> dict[str, Any]:
        try:
            return self._worker(text, lang, domain)
        except (TimeLimitExceeded, DocumentFailed) as exc:
            signals: dict[str, Any] = {f.name: None for f in self.provided_fields()}
            signals["rules_reason"] = (
                "timeout" if isinstance(exc, TimeLimitExceeded) else "rules_failed"
            )
            return signals

    def provided_fields(self) -> tuple[pa.Field, ...]:
        return self.columns

    def signals(
        self, text: str, lang: str | None = None, domain: str | None = None
    ) -> dict[str, Any]:
        """All signals and `rules_reason` for one document (`lang`/`domain` None = unknown prose)."""
        if not hasattr(self, "_tokenizer"):
            self.setup()
        config: RulesConfig = self.config  # type: ignore[assignment]
        cjk = config.script_aware and is_cjk(text, lang, config.cjk_languages)
        is_code = config.code_aware and domain is not None and domain in config.code.domains
        return document_signals(
            text, config, self._tokenizer, cjk=cjk, is_code=is_code, domain=domain, lang=lang
        )


def document_rules(config: RulesConfig) -> Any:
    """The document worker's work: (text, lang, domain) -> signals, built once per child."""
    return RulesStage(config).signals


def _optional_column(batch: pa.Table, name: str) -> list[Any]:
    if name in batch.column_names:
        return batch.column(name).to_pylist()
    return [None] * batch.num_rows
