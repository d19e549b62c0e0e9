"""Rule signals: Gopher quality and repetition, C4 and FineWeb line rules, garbled and log-like text.

Every rule is a numeric column; `rules_reason` (a soft tag) names the first failing clause:
`empty`, `garbled_text`, `log_like`, then datatrove's chain GopherRepetitionFilter ->
GopherQualityFilter -> C4QualityFilter -> FineWebQualityFilter with its default thresholds.
Documents of a code domain are judged by code clauses only (StarCoder-style line length and
alphanumeric share), never by prose rules.

Words: a compiled regex approximates spaCy's English tokenizer (what datatrove uses), about 20x
faster. With `script_aware` on, runs of CJK characters are cut into 2-character pseudo-words, so
a Chinese document's word count is its CJK characters / 2 (plus its non-CJK words); CJK documents
skip the mean-word-length clause, leave full-width punctuation out of the alphabetic-word share,
use a Chinese stop-word list and CJK sentence punctuation, and their characters count double for
FineWeb's short lines.

Signals are computed in a killable child under `timeout_s` CPU-seconds (data_pipeline.timelimit):
a crafted line can make one regex backtrack for a minute (`timeout`; a crash: `rules_failed`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from data_pipeline.stages.base import Stage, StageConfig
from data_pipeline.stages.rules_text import (
    ROUGH_WORD,
    Signals,
    c4_lines,
    code_reason,
    fineweb,
    garbled_ratio,
    gopher_quality,
    gopher_repetition,
    is_cjk,
    log_like_ratio,
    words,
)
from data_pipeline.timelimit import DocumentFailed, DocumentWorker, TimeLimitExceeded
from pretrain.config import MAX_TIMEOUT_S, StrictModel


class GopherRepetitionConfig(StrictModel):
    """Gopher (Rae et al. 2021, table A1) repetition thresholds; null disables a clause."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )


class GopherQualityConfig(StrictModel):
    """Gopher quality thresholds (datatrove GopherQualityFilter defaults); null disables."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    """'#' and ellipses per word (each)."""
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    min_alpha_words_ratio: float | None = 0.8
    """Share of words holding at least one letter (datatrove calls it max_non_alpha_words_ratio)."""
    min_stop_words: int | None = 2


class C4Config(StrictModel):
    """C4 line rules (datatrove C4QualityFilter defaults)."""

    enabled: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    """FineWeb's own recipe sets this false."""
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    curly_bracket_exempt_domains: tuple[str, ...] = ("math",)
    """LaTeX is all curly brackets: documents of these domains skip that clause."""


class FineWebConfig(StrictModel):
    """FineWeb quality rules (datatrove FineWebQualityFilter defaults)."""

    enabled: bool = True
    after_c4: bool = True
    """Judge the lines C4 keeps (datatrove's chain and FineWeb's recipe), not the raw text;
    with `c4.enabled: false` FineWeb always judges the raw text."""
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3
    """Newlines per word (stored as `newline_char_ratio`)."""


class CodeConfig(StrictModel):
    """Clauses for code documents (The Stack / StarCoder filters); null disables."""

    domains: tuple[str, ...] = ("code",)
    max_line_length: int | None = 1000
    max_mean_line_length: float | None = 100
    min_alnum_ratio: float | None = 0.25


class RulesConfig(StageConfig):
    """Config of the rule-signals stage (`stages.rules` in the pipeline YAML)."""

    timeout_s: float = Field(10.0, gt=0, le=MAX_TIMEOUT_S)
    """Per-document limit in CPU-seconds (an ordinary 5 MB document takes about 2.5); a document
    that uses more is stopped, tagged `rules_reason: timeout` with null signals, and counted in
    the ledger (data_pipeline.timelimit)."""
    script_aware: bool = True
    """Count CJK text by characters (see the module docstring); off = datatrove's behaviour."""
    code_aware: bool = True
    """Judge documents of `code.domains` by code clauses only."""
    cjk_languages: tuple[str, ...] = ("zh", "ja", "ko", "yue", "wuu")
    max_garbled_ratio: float | None = Field(0.01, ge=0, le=1)
    """Share of characters that are U+FFFD, C0 controls or mojibake sequences."""
    max_log_like_ratio: float | None = Field(0.5, ge=0, le=1)
    """Share of lines that look machine-generated (timestamps, log levels, hex dumps, traces)."""
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    gopher_quality: GopherQualityConfig = GopherQualityConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    code: CodeConfig = CodeConfig()


class RulesStage(Stage):
    """Appends Gopher / C4 / FineWeb / garbled / log-like signals and `rules_reason`."""

    name: ClassVar[str] = "rules"
    order: ClassVar[int] = 50
    columns: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("num_words", pa.int32()),
        pa.field("mean_word_length", pa.float32()),
        pa.field("symbol_ratio", pa.float32()),
        pa.field("bullet_line_ratio", pa.float32()),
        pa.field("ellipsis_line_ratio", pa.float32()),
        pa.field("alpha_word_ratio", pa.float32()),
        pa.field("stop_word_count", pa.int32()),
        pa.field("dup_line_frac", pa.float32()),
        pa.field("dup_para_frac", pa.float32()),
        pa.field("dup_line_char_frac", pa.float32()),
        pa.field("dup_para_char_frac", pa.float32()),
        pa.field("top_ngram_char_frac", pa.float32()),  # max over n = 2..4 (Gopher)
        pa.field("dup_ngram_char_frac", pa.float32()),  # max over n = 5..10 (Gopher)
        pa.field("c4_bad_line_frac", pa.float32()),
        pa.field("line_punct_ratio", pa.float32()),  # FineWeb: lines ending in punctuation
        pa.field("short_line_ratio", pa.float32()),  # FineWeb
        pa.field("char_dup_ratio", pa.float32()),  # FineWeb: chars in duplicated lines
        pa.field("newline_char_ratio", pa.float32()),  # FineWeb: newlines per word (list ratio)
        pa.field("garbled_ratio", pa.float32()),
        pa.field("log_like_ratio", pa.float32()),
        pa.field("rules_reason", pa.string()),
    )
    Config: ClassVar[type[StageConfig]] = RulesConfig
    config: RulesConfig

    def setup(self) -> None:
        self._worker = DocumentWorker(document_rules, self.config, seconds=self.config.timeout_s)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not hasattr(self, "_worker"):
            self.setup()
        texts = batch.column("text").to_pylist()
        langs = self.column_or_nulls(batch, "lang")
        domains = self.column_or_nulls(batch, "domain")
        names = [f.name for f in self.columns]
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
            signals: dict[str, Any] = {f.name: None for f in self.columns}
            signals["rules_reason"] = (
                "timeout" if isinstance(exc, TimeLimitExceeded) else "rules_failed"
            )
            return signals

    def signals(self, text: str, lang: str | None = None, domain: str | None = None) -> Signals:
        """Every rules column for one document (`lang`/`domain` None = unknown prose),
        `rules_reason` = the first failing clause."""
        config = self.config
        if not text.strip():
            return {**dict.fromkeys((f.name for f in self.columns), 0), "rules_reason": "empty"}
        cjk = config.script_aware and is_cjk(text, lang, config.cjk_languages)
        doc_words = words(text, cjk)
        rep, rep_reason = gopher_repetition(text, doc_words, config.gopher_repetition)
        quality, quality_reason = gopher_quality(text, doc_words, config.gopher_quality, cjk, lang)
        c4_bad, c4_reason, kept = c4_lines(text, config.c4, cjk, domain)
        if config.fineweb.after_c4 and config.c4.enabled:
            fw_text = "\n".join(kept).strip()
            kept_words = len(words(fw_text, cjk) if cjk else ROUGH_WORD.findall(fw_text))
            fw, fw_reason = fineweb(fw_text, kept_words, config.fineweb, cjk)
        else:
            fw, fw_reason = fineweb(text, len(doc_words), config.fineweb, cjk)
        garbled, log_like = garbled_ratio(text), log_like_ratio(text)
        reason = None
        if config.max_garbled_ratio is not None and garbled > config.max_garbled_ratio:
            reason = "garbled_text"
        elif config.max_log_like_ratio is not None and log_like > config.max_log_like_ratio:
            reason = "log_like"
        elif config.code_aware and domain is not None and domain in config.code.domains:
            reason = code_reason(text, config.code)
        else:
            reason = rep_reason or quality_reason or c4_reason or fw_reason
        return {
            **rep,
            **quality,
            "c4_bad_line_frac": c4_bad,
            **fw,
            "garbled_ratio": garbled,
            "log_like_ratio": log_like,
            "rules_reason": reason,
        }


def document_rules(config: RulesConfig) -> Any:
    """The document worker's work: (text, lang, domain) -> signals, built once per child."""
    return RulesStage(config).signals
