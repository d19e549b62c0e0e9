"""Benchmark decontamination: the training documents that share a normalised word n-gram (13 by
default; GPT-3, Brown et al. 2020, appendix C) with a task example's text. Rules: docs/evals.md
("Eval sets"); the hits join the MinHash hits in `contaminated.parquet` (evals/sets.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from data_pipeline.normalization import CJK

if TYPE_CHECKING:
    from evals.tasks import Task

_WORD = re.compile(f"[{CJK}]|[^\\W{CJK}]+")
_BASE = np.uint64(0x100000001B3)  # any odd multiplier: a polynomial hash of each word window
Owner = tuple[str, str]
"""(task name, example id)."""


def words(text: str) -> list[str]:
    """NFKC, lower case; words are runs of letters and digits, each CJK character one word."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def window_hashes(tokens: list[str], width: int) -> np.ndarray:
    """One 64-bit hash per window of `width` consecutive words (none if there are fewer)."""
    if len(tokens) < width:
        return np.zeros(0, dtype=np.uint64)
    ids = np.fromiter((xxhash.xxh64_intdigest(w) for w in tokens), np.uint64, len(tokens))
    count = len(ids) - width + 1
    out = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(width):
            out = out * _BASE + ids[k : k + count]  # wraps mod 2**64, as intended
    return out


_LABELS = re.compile(
    r"^\s*(?:question|q|problem|passage|context)\s*[:.]\s*|\s*(?:answer|a)\s*:\s*$", re.I
)


def example_texts(example: dict) -> list[str]:
    """The texts of one task example that training data must not hold (module docstring); a
    prompt's labels (`Question:` before the context, `Answer:` after it) are not its text."""
    context = _LABELS.sub("", example["context"])
    if "choices" in example:
        return [context + example["choices"][example["answer"]], context]
    return [context + example["continuation"], context]


class TaskIndex:
    """The n-grams of every task example, by window width: `ngram`, and the lengths of the
    examples shorter than that (matched whole)."""

    def __init__(self, tasks: Iterable[Task], ngram: int = 13, min_words: int = 8) -> None:
        self.ngram = ngram
        self.owners: dict[int, dict[int, set[Owner]]] = defaultdict(lambda: defaultdict(set))
        self.unchecked: dict[str, int] = {}
        self.examples: dict[str, int] = {}
        for task in tasks:
            self.examples[task.name] = len(task.examples)
            self.unchecked[task.name] = 0
            for number, example in enumerate(task.examples):
                owner = (task.name, str(example.get("id", number)))
                checked = False
                for text in example_texts(example):
                    tokens = words(text)
                    if len(tokens) < min(min_words, ngram):
                        continue
                    width = min(ngram, len(tokens))
                    for value in window_hashes(tokens, width).tolist():
                        self.owners[width][value].add(owner)
                    checked = True
                self.unchecked[task.name] += not checked

    def __bool__(self) -> bool:
        """Whether any example was indexed (there is something to check)."""
        return bool(self.owners)

    def matches(self, text: str) -> set[Owner]:
        """The task examples whose text `text` holds (an n-gram, or the whole short example)."""
        found: set[Owner] = set()
        tokens = words(text) if self.owners else []
        for width, table in self.owners.items():
            for value in set(window_hashes(tokens, width).tolist()) & table.keys():
                found |= table[value]
        return found
