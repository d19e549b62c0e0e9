"""The one text normalisation and tokenisation shared by model training and scoring.

fastText classifiers and KenLM models are trained by `pretrain data train-classifier` /
`train-lm` and applied by the pipeline stages; both sides call these functions, and each model
records `NORMALIZATION` in its `model.json` so a stage refuses a model made with another scheme.

Scheme `pretrain-text-v1` (CCNet-like, without a sentencepiece model to ship):
- Unicode NFKC, lowercase, every ASCII and full-width digit replaced by `0` (CCNet does the same).
- Tokens: each CJK ideograph, kana or hangul syllable is its own token (Chinese uses the
  *character* scheme: no segmenter, so training and scoring cannot disagree on word boundaries);
  runs of other letters form a word; runs of digits form a number; every other visible character
  (punctuation, symbols) is its own token.
- KenLM sees one sentence per non-empty line of the document; fastText sees the whole document
  (first `max_chars` characters) on one line.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NORMALIZATION: dict[str, object] = {
    "scheme": "pretrain-text-v1",
    "unicode": "NFKC",
    "lowercase": True,
    "digits": "0",
    "cjk": "character",
    "lm_sentence": "line",
}
"""What `model.json` records; stages compare `scheme` before using a model."""

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
"""Kana, CJK ideographs (BMP) and hangul syllables, as the body of a regex character class: the
quality rules (stages/rules_text.py) and benchmark decontamination (evals/task_overlap.py) count
these as CJK characters."""
_CJK = CJK + "\U00020000-\U0002fa1f"  # and the supplementary-plane ideographs
# Alternatives start with disjoint character classes, so their order and the possessive `++`
# (no backtracking) do not change the tokens; letters first and `++` make it ~15% faster.
_TOKEN = re.compile(rf"[^\W\d_{_CJK}]++|[{_CJK}]|\d++|[^\w\s\x00-\x1f\x7f-\x9f]|_")
_DIGITS = str.maketrans("123456789", "000000000")


def normalize(text: str) -> str:
    """NFKC, lowercase, digits -> 0 (the first step of every model's input)."""
    return unicodedata.normalize("NFKC", text).lower().translate(_DIGITS)


def lm_sentences(text: str | None) -> list[str]:
    """KenLM input: one space-joined token string per non-empty line of the document."""
    if not text:
        return []
    sentences = []
    for line in normalize(text).splitlines():
        tokens = _TOKEN.findall(line)
        if tokens:
            sentences.append(" ".join(tokens))
    return sentences


def classifier_line(text: str | None, max_chars: int) -> str:
    """fastText input: the first `max_chars` characters, tokenised, on one line."""
    if not text:
        return ""
    return " ".join(_TOKEN.findall(normalize(text[:max_chars])))


def document_perplexity(model: Any, text: str | None) -> tuple[float, int] | None:
    """(log10 probability, scored tokens incl. </s> per line) of one document; None if empty."""
    sentences = lm_sentences(text)
    if not sentences:
        return None
    log10 = 0.0
    count = 0
    for sentence in sentences:
        log10 += model.score(sentence, bos=True, eos=True)
        count += sentence.count(" ") + 2
    return log10, count
