"""Text primitives of the rule-signals stage: plain Python, compiled regexes and numpy.

See data_pipeline/stages/rules.py for what the signals mean and the clause order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION

from data_pipeline.normalization import CJK

if TYPE_CHECKING:
    from data_pipeline.stages.rules import (
        C4Config,
        CodeConfig,
        FineWebConfig,
        GopherQualityConfig,
        GopherRepetitionConfig,
    )

# ---------------------------------------------------------------------------------------------
# Text primitives (plain Python + compiled regexes + numpy; no engine needed)
# ---------------------------------------------------------------------------------------------

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
_ABBREVIATIONS = frozenset(
    line.strip()
    for line in (RESOURCES / "en_abbreviations.txt").read_text().splitlines()
    if line.strip()
)
_STOP_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words)
    for lang, words in json.loads((RESOURCES / "stop_words.json").read_text("utf-8")).items()
}
_NOT_PUNCT = re.compile("[^" + "".join(sorted(map(re.escape, PUNCTUATION_SET))) + "]")
_TERMINAL = frozenset(TERMINAL_PUNCTUATION)
_CJK_RE = re.compile(f"[{CJK}]")
_CJK_PUNCT = frozenset("，。、；：！？（）「」『』《》〈〉【】“”‘’…—～·")
_LETTER_RE = re.compile(r"[^\W\d_]")
_NOT_ALNUM_RUN = re.compile(r"[\W_]+")
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f]")
_PARA_SPLIT = re.compile(r"\n{2,}")
_LINE_SPLIT = re.compile("\n+")
ROUGH_WORD = re.compile(r"\w+|[^\w\s]")  # kept C4 lines: newlines per word is far from 0.3
_NONEMPTY_LINE = re.compile(r"\n[ \t]*\S")  # over "\n" + text: a literal to scan for
# From datatrove's C4QualityFilter (itself from tensorflow_datasets c4_utils), Apache-2.0.
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_END_PUNCT = (".", "?", "!", '"', "'")
_END_PUNCT_CJK = _END_PUNCT + ("。", "！", "？", "」", "』", "”", "）")
_POLICY = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_SENT_END = re.compile(r"(?<!\S)(\S*?)([.!?]+)[\"'”’)\]]*\s+(?=[\"'“‘(\[]*\w)")
_INNER_SENT_END = re.compile(r"(?<=[a-z])[.!?](?=[A-Z][a-z])")
_CJK_SENT_END = re.compile(r"[。！？!?]+[」』”）]*(?=\s*\S)")
_ACRONYM_STEM = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")
_GARBLED = re.compile(
    "\ufffd|[\x00-\x08\x0b\x0e-\x1f\x7f]|[ÃÂ][\x80-\xbf]|[\u00c0-\u00ff]{4,}"
    "|â€[\x80-\xbf\u0152\u0153\u0160\u0161\u0178\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026"
    "\u2030\u2039\u203a\u20ac\u2122]"
)
_LOG_LINE = re.compile(r"""(?x)\n[ \t]*(?:
      \[?\d{4}-\d{2}-\d{2}[T\s]\d{2}:\d{2}
    | \[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?\s
    | (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}
    | \[\s*\d+\.\d{3,}\]
    | \[?(?:TRACE|DEBUG|INFO|NOTICE|WARN(?:ING)?|ERROR|FATAL|CRITICAL)\]?[\s:]
    | (?:0x)?[0-9a-fA-F]{6,}:?\s+(?:[0-9a-fA-F]{2,8}\s+){3,}
    | at\s+[\w$.]+\([\w$.]*(?::\d+)?\)
    | File\s+"[^"\n]+",\s+line\s+\d+
    | \d{1,3}(?:\.\d{1,3}){3}\s+-\s+\S+\s+\[
    | (?:[\w.-]+=[^\s=]+[ \t,;]+){3,}
)""")


def _token_regex(cjk: bool) -> re.Pattern[str]:
    """Words close to spaCy's English tokenizer as datatrove counts them: URLs whole, clitics
    ('s, 't, 're, 've, 'll, 'd, 'm) split off, '.', ',', ':', '/', '-' kept inside a word when they
    join word characters ("3.5", "file.txt", "1,000", "well-known"), each punctuation mark a token
    ("..." and "--" one) except ~ ^ | \\ * which stay inside tokens. Cheaper than spaCy's exception
    lists and agrees on 99.7% of keep/drop decisions (benchmarks/bench_rules.py)."""
    glue = r"~^|\\*"  # not split off by spaCy's English rules: "~~~~", "a|b", "**" stay whole
    word = f"(?:[^\\W{CJK}]|[{glue}])" if cjk else f"[\\w{glue}]"
    clitic = r"(?:[sSdDmMtT]|re|RE|ve|VE|ll|LL)\b"
    joiner = rf"(?:(?<![a-z])\.|\.(?![A-Z])|['’](?!{clitic})|(?<=\d)[,:/-]|-)"
    cjk_alt = f"| [{CJK}]{{1,2}}" if cjk else ""
    return re.compile(
        rf"""
        (?:https?://|www\.)[^\s<>"']*[^\s<>"'.,;:!?)\]]
      | ['’]{clitic}
      | {word}+(?:{joiner}(?={word}){word}+)*
      {cjk_alt}
      | \.{{2,}} | -{{2,}} | [^\w\s]
    """,
        re.VERBOSE,
    )


_TOKEN_PLAIN = _token_regex(cjk=False)
_TOKEN_CJK = _token_regex(cjk=True)


def words(text: str, cjk: bool) -> list[str]:
    """The document's words (the regex above; CJK runs cut into 2-character pseudo-words)."""
    return (_TOKEN_CJK if cjk else _TOKEN_PLAIN).findall(text)


def is_cjk(text: str, lang: str | None, cjk_languages: tuple[str, ...]) -> bool:
    """CJK by the language tag, or (tag missing) by a majority of CJK among letters."""
    if lang:
        return lang.replace("-", "_").split("_")[0].lower() in cjk_languages
    head = text[:20_000]
    cjk = len(_CJK_RE.findall(head))
    if cjk == 0:
        return False
    letters = len(_LETTER_RE.findall(head))
    return letters > 0 and cjk / letters > 0.3


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(number of repeated items, characters in them): Gopher's duplicate line/paragraph count."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


_GRAM_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


class NGrams:
    """Word n-grams of one document as rolling 64-bit hashes (numpy), with Gopher's two counts.

    Equal hashes stand for equal n-grams (a collision needs ~2**32 distinct grams)."""

    def __init__(self, words: list[str]) -> None:
        count = len(words)
        self.base = np.fromiter(map(hash, words), np.int64, count).view(np.uint64)
        self.cumlen = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, words), np.int64, count), out=self.cumlen[1:])
        self._grams: dict[int, np.ndarray] = {1: self.base}
        self._no_dups_from: int | None = None

    def grams(self, n: int) -> np.ndarray:
        """Hash of the n-gram starting at each word."""
        if n not in self._grams:
            shorter = self.grams(n - 1)
            self._grams[n] = (
                shorter[:-1] * _GRAM_MULTIPLIER + self.base[n - 1 :]
                if len(shorter) > 1
                else shorter[:0]
            )
        return self._grams[n]

    def top_chars(self, n: int) -> int:
        """Characters of the most frequent n-gram (joined by spaces) times its count."""
        grams = self.grams(n).tolist()
        if not grams:
            return 0
        gram, count = Counter(grams).most_common(1)[0]  # ties: earliest gram, as datatrove
        start = grams.index(gram)
        return int(self.cumlen[start + n] - self.cumlen[start] + n - 1) * count

    def dup_chars(self, n: int) -> int:
        """Characters in repeated n-grams, greedy and non-overlapping as datatrove counts them:
        scanning left to right, a gram seen before counts its characters and skips n words."""
        if self._no_dups_from is not None and n >= self._no_dups_from:
            return 0  # no repeated k-gram means no repeated (k + 1)-gram
        array = self.grams(n)
        m = len(array)
        order = np.argsort(array, kind="stable")  # equal grams together, in text order
        same = array[order[1:]] == array[order[:-1]]
        if not same.any():
            self._no_dups_from = n if self._no_dups_from is None else min(n, self._no_dups_from)
            return 0
        previous = np.full(m, -1, dtype=np.int64)  # the nearest earlier copy of each gram
        previous[order[1:][same]] = order[:-1][same]
        candidates = np.flatnonzero(previous >= 0)
        chars = (self.cumlen[candidates + n] - self.cumlen[candidates]).tolist()
        earlier = previous.tolist()
        skipped = bytearray(m + n)
        skip_until = total = 0
        for i, size in zip(candidates.tolist(), chars, strict=True):
            if i < skip_until:
                continue
            j = earlier[i]
            while j >= 0 and skipped[j]:  # copies inside a counted repeat were never seen
                j = earlier[j]
            if j < 0:
                continue
            total += size
            skipped[i + 1 : i + n] = b"\x01" * (n - 1)
            skip_until = i + n
        return total


# ---------------------------------------------------------------------------------------------
# Rule families: each returns its signals and its first failing clause (None = passes)
# ---------------------------------------------------------------------------------------------

Signals = dict[str, Any]


def gopher_repetition(
    text: str, words: list[str], cfg: GopherRepetitionConfig
) -> tuple[Signals, str | None]:
    """Gopher repetition signals (datatrove GopherRepetitionFilter semantics)."""
    n_chars = max(len(text), 1)
    paragraphs = _PARA_SPLIT.split(text.strip())
    para_dups, para_chars = find_duplicates(paragraphs)
    lines = _LINE_SPLIT.split(text)
    line_dups, line_chars = find_duplicates(lines)
    checks: list[tuple[str, float, float | None]] = [
        ("gopher_dup_para_frac", para_dups / len(paragraphs), cfg.dup_para_frac),
        ("gopher_dup_para_char_frac", para_chars / n_chars, cfg.dup_para_char_frac),
        ("gopher_dup_line_frac", line_dups / len(lines), cfg.dup_line_frac),
        ("gopher_dup_line_char_frac", line_chars / n_chars, cfg.dup_line_char_frac),
    ]
    ngrams = NGrams(words)
    top = [
        (f"gopher_top_{n}_gram", ngrams.top_chars(n) / n_chars, thr) for n, thr in cfg.top_n_grams
    ]
    dup = [
        (f"gopher_dup_{n}_gram", ngrams.dup_chars(n) / n_chars, thr) for n, thr in cfg.dup_n_grams
    ]
    signals = {name.removeprefix("gopher_"): value for name, value, _ in checks}
    signals["top_ngram_char_frac"] = max((v for _, v, _ in top), default=0.0)
    signals["dup_ngram_char_frac"] = max((v for _, v, _ in dup), default=0.0)
    return signals, _first_above(checks + top + dup)


def _first_above(checks: list[tuple[str, float, float | None]]) -> str | None:
    for name, value, limit in checks:
        if limit and value > limit:
            return name
    return None


def _above(value: float, limit: float | None) -> bool:
    return bool(limit) and value > limit  # type: ignore[operator]  # null or 0 disables


def _below(value: float, limit: float | None) -> bool:
    return bool(limit) and value < limit  # type: ignore[operator]  # null or 0 disables


def _quality_signals(text: str, words: list[str], cjk: bool) -> tuple[Signals, float, float]:
    """Gopher quality columns, plus the '#' and ellipsis ratios judged separately."""
    n_words = max(len(words), 1)
    kept = list(filter(_NOT_PUNCT.search, words))
    hashes = text.count("#") / n_words
    ellipses = (text.count("...") + text.count("…")) / n_words
    lines = text.splitlines() or [""]
    alpha_words = sum(map(bool, map(_LETTER_RE.search, words)))
    if cjk:  # a CJK sentence has ~2x the punctuation per (2-character) word of an English one
        n_words = max(n_words - sum(map(_CJK_PUNCT.__contains__, words)), 1)
    if cjk:
        stops = sum(1 for w in _STOP_WORDS["zh"] if w in text)
    else:
        stops = len(_STOP_WORDS["en"].intersection(words))
    signals = {
        "num_words": len(kept),
        "mean_word_length": sum(map(len, kept)) / len(kept) if kept else 0.0,
        "symbol_ratio": max(hashes, ellipses),
        "bullet_line_ratio": sum(1 for s in lines if s.lstrip().startswith(("•", "-")))
        / len(lines),
        "ellipsis_line_ratio": sum(1 for s in lines if s.rstrip().endswith(("...", "…")))
        / len(lines),
        "alpha_word_ratio": alpha_words / n_words,
        "stop_word_count": stops,
    }
    return signals, hashes, ellipses


def gopher_quality(
    text: str, words: list[str], cfg: GopherQualityConfig, cjk: bool, lang: str | None
) -> tuple[Signals, str | None]:
    """Gopher quality signals (datatrove GopherQualityFilter semantics); CJK-aware when `cjk`:
    no mean-word-length clause, Chinese stop words; other languages without a stop-word list
    skip that clause."""
    s, hashes, ellipses = _quality_signals(text, words, cjk)
    c = cfg
    judge_length = not cjk and s["num_words"] > 0
    stop_lang = "zh" if cjk else (lang or "en").split("_")[0].split("-")[0]
    clauses = [
        ("gopher_too_few_words", _below(s["num_words"], c.min_doc_words)),
        ("gopher_too_many_words", _above(s["num_words"], c.max_doc_words)),
        (
            "gopher_short_mean_word",
            judge_length and _below(s["mean_word_length"], c.min_avg_word_length),
        ),
        (
            "gopher_long_mean_word",
            judge_length and _above(s["mean_word_length"], c.max_avg_word_length),
        ),
        ("gopher_too_many_hashes", _above(hashes, c.max_symbol_word_ratio)),
        ("gopher_too_many_ellipsis", _above(ellipses, c.max_symbol_word_ratio)),
        ("gopher_too_many_bullets", _above(s["bullet_line_ratio"], c.max_bullet_lines_ratio)),
        (
            "gopher_too_many_end_ellipsis",
            _above(s["ellipsis_line_ratio"], c.max_ellipsis_lines_ratio),
        ),
        ("gopher_few_alpha_words", _below(s["alpha_word_ratio"], c.min_alpha_words_ratio)),
        (
            "gopher_few_stop_words",
            stop_lang in _STOP_WORDS and _below(s["stop_word_count"], c.min_stop_words),
        ),
    ]
    return s, next((name for name, failed in clauses if failed), None)


def count_sentences(line: str, cjk: bool) -> int:
    """Sentences in one line, as spaCy's sentencizer splits them (abbreviations do not end one)."""
    if cjk:
        return 1 + len(_CJK_SENT_END.findall(line))
    count = 1 + len(_INNER_SENT_END.findall(line))
    for match in _SENT_END.finditer(line):
        marks = match.group(2)
        if len(marks) >= 3 and set(marks) == {"."}:
            continue  # "..." is not a sentence end for the sentencizer
        if marks == ".":
            stem = match.group(1).lstrip("\"'“‘([{")
            if f"{stem}." in _ABBREVIATIONS or _ACRONYM_STEM.fullmatch(stem):
                continue
        count += 1
    return count


def c4_lines(
    text: str, cfg: C4Config, cjk: bool, domain: str | None
) -> tuple[float, str | None, list[str]]:
    """C4 line rules: (share of non-empty lines removed, first failing doc clause, kept lines)."""
    end_punct = _END_PUNCT_CJK if cjk else _END_PUNCT
    curly = cfg.filter_curly_bracket and domain not in cfg.curly_bracket_exempt_domains
    kept: list[str] = []
    reason, sentences, nonempty = None, 0, 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        nonempty += 1
        words = line.split()
        if (
            cfg.max_word_length != -1
            and len(line) > cfg.max_word_length
            and max(map(len, words)) > cfg.max_word_length
        ):
            continue
        if cfg.remove_citations:
            line = _CITATION.sub("", line)
        if cfg.filter_no_terminal_punct and (not line.endswith(end_punct) or line.endswith("...")):
            continue
        num_words = max(len(words), len(_CJK_RE.findall(line)) // 2) if cjk else len(words)
        if num_words < cfg.min_words_per_line:
            continue
        lower = line.lower()
        if cfg.filter_lorem_ipsum and "lorem ipsum" in lower:
            reason = reason or "c4_lorem_ipsum"
        if cfg.filter_javascript and "javascript" in lower:
            continue
        if curly and "{" in line:
            reason = reason or "c4_curly_bracket"
        if cfg.filter_policy and any(p in lower for p in _POLICY):
            continue
        if cfg.min_num_sentences != -1:
            sentences += count_sentences(line, cjk)
        kept.append(line)
    if reason is None and cfg.min_num_sentences != -1 and sentences < cfg.min_num_sentences:
        reason = "c4_too_few_sentences"
    bad = 1.0 - len(kept) / nonempty if nonempty else 0.0
    return bad, (reason if cfg.enabled else None), kept


def fineweb(
    text: str, word_count: int, cfg: FineWebConfig, cjk: bool
) -> tuple[Signals, str | None]:
    """FineWeb quality signals over `text` (datatrove FineWebQualityFilter semantics)."""
    lines = [line for line in text.split("\n") if line.strip() != ""]
    if not lines:
        zero = {
            "line_punct_ratio": 0.0,
            "short_line_ratio": 0.0,
            "char_dup_ratio": 0.0,
            "newline_char_ratio": 0.0,
        }
        return zero, "fineweb_empty" if cfg.enabled else None
    punct = sum(1 for line in lines if line[-1] in _TERMINAL) / len(lines)
    if cjk:
        lengths = [len(line) + len(_CJK_RE.findall(line)) for line in lines]
    else:
        lengths = list(map(len, lines))
    short = sum(1 for n in lengths if n <= cfg.short_line_length) / len(lines)
    char_dup = find_duplicates(lines)[1] / max(len(text) - text.count("\n"), 1)
    newline = text.count("\n") / max(word_count, 1)
    signals = {
        "line_punct_ratio": punct,
        "short_line_ratio": short,
        "char_dup_ratio": char_dup,
        "newline_char_ratio": newline,
    }
    clauses = [
        (
            "fineweb_line_punct",
            punct < cfg.line_punct_thr and not (punct == 0 and cfg.line_punct_exclude_zero),
        ),
        ("fineweb_short_lines", short > cfg.short_line_thr),
        ("fineweb_char_dup", char_dup > cfg.char_duplicates_ratio),
        ("fineweb_list_ratio", newline > cfg.new_line_ratio),
    ]
    reason = next((name for name, failed in clauses if failed), None)
    return signals, reason if cfg.enabled else None


def garbled_ratio(text: str) -> float:
    """Share of characters that are U+FFFD, control characters or UTF-8/GBK mojibake."""
    pattern = _CONTROL if text.isascii() else _GARBLED  # isascii() is O(1) in CPython
    return sum(map(len, pattern.findall(text))) / max(len(text), 1)


def log_like_ratio(text: str) -> float:
    """Share of non-empty lines that look machine-generated (log, trace, hex dump, key=value)."""
    text = "\n" + text
    lines = len(_NONEMPTY_LINE.findall(text))
    return len(_LOG_LINE.findall(text)) / lines if lines else 0.0


def code_reason(text: str, cfg: CodeConfig) -> str | None:
    """The Stack / StarCoder clauses for source files."""
    lengths = list(map(len, text.splitlines())) or [0]
    if cfg.max_line_length is not None and max(lengths) > cfg.max_line_length:
        return "code_long_line"
    if cfg.max_mean_line_length is not None and (
        sum(lengths) / len(lengths) > cfg.max_mean_line_length
    ):
        return "code_long_mean_line"
    if cfg.min_alnum_ratio is not None and (
        1 - sum(map(len, _NOT_ALNUM_RUN.findall(text))) / max(len(text), 1) < cfg.min_alnum_ratio
    ):
        return "code_low_alnum"
    return None
