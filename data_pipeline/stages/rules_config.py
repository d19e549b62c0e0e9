"""Configuration of the rule-signals stage (thresholds default to datatrove's)."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
from pydantic import Field

from data_pipeline.stages.base import StageConfig
from pretrain.config import MAX_TIMEOUT_S, StrictModel

RULES_COLUMNS: tuple[pa.Field, ...] = (
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
"""The rules stage's columns (RulesStage.columns): one numeric signal per rule, then the reason."""


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

    word_tokenizer: Literal["fast", "spacy"] = "fast"
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
