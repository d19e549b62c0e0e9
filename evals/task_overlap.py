"""Benchmark decontamination: the training documents that hold a task example's text.

The GPT-3 check (Brown et al. 2020, appendix C; DataTrove's n-gram decontamination of lighteval
tasks does the same): a training document is contaminated by a task example when the two share a
word n-gram (13 by default) of normalised text. Normalised: NFKC, lower case, words are runs of
letters and digits, each CJK character is a word, punctuation and spacing are ignored. An example
shorter than n words must appear whole in the document (when it has at least `min_words` words;
shorter ones are too common to judge: counted as `unchecked_examples`).

Per example, two texts are checked: the context followed by the correct choice (multiple choice)
or the continuation (cloze), and the context alone, without a prompt's `Question:` / `Answer:`
labels. So a document holding the question verbatim,
the question and its answer, or an FAQ holding several questions is caught; one sharing only
common phrases (shorter than n words) is not. The hits join the held-out split's MinHash hits in
`contaminated.parquet` (evals/sets.py), the one list a mixture excludes (`build.decontaminate`).
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from data_pipeline.models.normalization import CJK

if TYPE_CHECKING:
    from evals.tasks import Task

_WORD = re.compile(f"[{CJK}]|[^\\W{CJK}]+")
_BASE = np.uint64(0x100000001B3)  # any odd multiplier: a polynomial hash of each word window
Owner = tuple[str, str]
"""(task name, example id)."""


def words(text: str) -> list[str]:
    """The normalised words of `text` (module docstring)."""
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
        self._keys = {  # sorted once: a lookup is a binary search (np.isin sorts every call)
            width: np.sort(np.fromiter(table, np.uint64, len(table)))
            for width, table in self.owners.items()
        }

    def __bool__(self) -> bool:
        """Whether any example was indexed (there is something to check)."""
        return bool(self._keys)

    def matches(self, text: str) -> set[Owner]:
        """The task examples whose text `text` holds (an n-gram, or the whole short example)."""
        if not self._keys:
            return set()
        tokens = words(text)
        found: set[Owner] = set()
        for width, keys in self._keys.items():
            hashes = window_hashes(tokens, width)
            if not len(hashes):
                continue
            at = np.minimum(np.searchsorted(keys, hashes), len(keys) - 1)
            for value in np.unique(hashes[keys[at] == hashes]).tolist():
                found |= self.owners[width][value]
        return found
