"""Interpolated modified Kneser-Ney n-gram estimation in numpy, written as an ARPA file.

This replaces KenLM's `lmplz` (a C++ build with Boost) for the model sizes we train; `kenlm.Model`
loads the ARPA it writes. The estimate follows Chen & Goodman (1998) as lmplz implements it
(Heafield et al., 2013):
- highest order: raw counts; lower orders: continuation counts N1+(. g) (number of distinct left
  extensions), except n-grams starting with <s>, which keep raw counts;
- three discounts per order from the count-of-counts t1..t4 of those adjusted counts
  (D_k = k - (k+1) Y t_{k+1} / t_k, Y = t1 / (t1 + 2 t2)), falling back to 0.5 / 1 / 1.5 when the
  counts are too few to estimate them (lmplz's --discount_fallback);
- interpolation down to a uniform distribution over the vocabulary (which includes <unk>);
- ARPA backoff of a context h = gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3 N3+(h.)) / sum_w a(h w), so
  every context's distribution sums to one.

N-grams get integer ids order by order: the id of (h, w) is the rank of `id(h) * V + w` among the
unique keys, so counting is `np.unique` over int64 keys instead of Python dicts of tuples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from pretrain.progress import Progress

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


@dataclass
class Order:
    """The unique n-grams of one order: context id (order n-1), last word, suffix id (n-1)."""

    context: np.ndarray
    word: np.ndarray
    suffix: np.ndarray
    count: np.ndarray
    starts_bos: np.ndarray
    adjusted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prob: np.ndarray = field(default_factory=lambda: np.zeros(0))
    backoff: np.ndarray = field(default_factory=lambda: np.zeros(0))
    keep: np.ndarray | None = None
    """Which n-grams the ARPA lists (None: all); see `prune`."""
    discounts: tuple[float, float, float] = FALLBACK_DISCOUNTS


@dataclass
class Corpus:
    """Token ids of all sentences, each wrapped in <s> ... </s>, and each token's position."""

    vocab: list[str]
    tokens: np.ndarray
    position: np.ndarray


def encode(sentences: Iterable[str]) -> Corpus:
    """Map space-tokenised sentences to ids (0 <unk>, 1 <s>, 2 </s>, then by first appearance)."""
    vocab = [UNK, BOS, EOS]
    index = {w: i for i, w in enumerate(vocab)}
    ids: list[int] = []
    positions: list[int] = []
    for sentence in sentences:
        words = sentence.split()
        ids.append(1)
        for word in words:
            wid = index.get(word)
            if wid is None:
                wid = index[word] = len(vocab)
                vocab.append(word)
            ids.append(wid)
        ids.append(2)
        positions.extend(range(len(words) + 2))
    return Corpus(vocab, np.asarray(ids, dtype=np.int64), np.asarray(positions, dtype=np.int64))


def count_orders(corpus: Corpus, order: int) -> list[Order]:
    """Unique n-grams of orders 1..order with raw counts and their context / suffix ids."""
    vocab_size = len(corpus.vocab)
    tokens, position = corpus.tokens, corpus.position
    unigram_ids = np.arange(vocab_size, dtype=np.int64)
    orders = [
        Order(
            context=np.zeros(vocab_size, dtype=np.int64),
            word=unigram_ids,
            suffix=np.zeros(vocab_size, dtype=np.int64),
            count=np.bincount(tokens, minlength=vocab_size),
            starts_bos=unigram_ids == 1,
        )
    ]
    previous = tokens.copy()  # id of the (n-1)-gram ending at each position (-1: none)
    for n in range(2, order + 1):
        valid = np.flatnonzero(position >= n - 1)
        keys = previous[valid - 1] * vocab_size + tokens[valid]
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        current = np.full(len(tokens), -1, dtype=np.int64)
        current[valid] = inverse
        first_pos = valid[first]
        orders.append(
            Order(
                context=unique // vocab_size,
                word=unique % vocab_size,
                suffix=previous[first_pos],
                count=np.bincount(inverse, minlength=len(unique)),
                starts_bos=position[first_pos] == n - 1,
            )
        )
        previous = current
    return orders


def discounts(adjusted: np.ndarray) -> tuple[float, float, float]:
    """Modified Kneser-Ney D1, D2, D3+ from count-of-counts (fallback when not estimable)."""
    t = [int(np.count_nonzero(adjusted == k)) for k in (1, 2, 3, 4)]
    if min(t) == 0:
        return FALLBACK_DISCOUNTS
    y = t[0] / (t[0] + 2 * t[1])
    values = tuple(k - (k + 1) * y * t[k] / t[k - 1] for k in (1, 2, 3))
    if not all(0 < d < k for d, k in zip(values, (1, 2, 3), strict=True)):
        return FALLBACK_DISCOUNTS
    return values  # type: ignore[return-value]


def _discount_of(adjusted: np.ndarray, d: tuple[float, float, float]) -> np.ndarray:
    table = np.array([0.0, *d])
    return table[np.minimum(adjusted, 3)]


def estimate(orders: list[Order], vocab_size: int) -> None:
    """Fill adjusted counts, discounts, interpolated probabilities and backoffs in place."""
    top = len(orders)
    for n in range(top):
        o = orders[n]
        if n == top - 1:
            o.adjusted = o.count.copy()
        else:
            continuation = np.bincount(orders[n + 1].suffix, minlength=len(o.count))
            o.adjusted = np.where(o.starts_bos, o.count, continuation)
    predicted = np.ones(vocab_size, dtype=bool)
    predicted[1] = False  # <s> is never predicted
    for n, o in enumerate(orders):
        mask = predicted if n == 0 else np.ones(len(o.count), dtype=bool)
        o.discounts = discounts(o.adjusted[mask])
        discount = _discount_of(o.adjusted, o.discounts) * mask
        if n == 0:
            total = float(o.adjusted[mask].sum())
            gamma = float(discount.sum()) / total
            o.prob = np.where(mask, (o.adjusted - discount) / total + gamma / mask.sum(), 0.0)
            continue
        num_contexts = len(orders[n - 1].count)
        denominator = np.bincount(o.context, weights=o.adjusted, minlength=num_contexts)
        mass = np.bincount(o.context, weights=discount, minlength=num_contexts)
        safe = np.where(denominator > 0, denominator, 1.0)
        gamma = mass / safe
        orders[n - 1].backoff = np.where(denominator > 0, gamma, 1.0)
        lower = orders[n - 1].prob[o.suffix]
        o.prob = (o.adjusted - discount) / safe[o.context] + gamma[o.context] * lower
    orders[-1].backoff = np.ones(len(orders[-1].count))


def prune(orders: list[Order], from_order: int) -> None:
    """Drop n-grams seen once at orders >= `from_order` (like lmplz --prune 0 0 1 for 3), then
    renormalise the backoffs so every context still sums to one.

    An n-gram stays when it is the context or the suffix of a kept longer n-gram, so the ARPA
    stays consistent. Kept n-grams keep their interpolated probability; a pruned word w after h
    gets backoff(h) * p(w | h'), with backoff(h) = (1 - sum_kept p(.|h)) / (1 - sum_kept p(.|h')).
    """
    top = len(orders)
    for n in range(top - 1, -1, -1):
        o = orders[n]
        if n + 1 < from_order:
            o.keep = np.ones(len(o.count), dtype=bool)
            continue
        keep = o.count >= 2
        if n + 1 < top:
            longer = orders[n + 1]
            kept = longer.keep if longer.keep is not None else np.ones(len(longer.count), bool)
            keep[longer.context[kept]] = True
            keep[longer.suffix[kept]] = True
        o.keep = keep
    for n in range(max(from_order - 1, 1), top):
        o, shorter = orders[n], orders[n - 1]
        kept = o.keep
        size = len(shorter.count)
        kept_prob = np.bincount(o.context[kept], weights=o.prob[kept], minlength=size)
        kept_lower = np.bincount(
            o.context[kept], weights=shorter.prob[o.suffix[kept]], minlength=size
        )
        left, right = 1.0 - kept_prob, 1.0 - kept_lower
        shorter.backoff = np.where(
            right > 1e-12, np.maximum(left, 0.0) / np.maximum(right, 1e-12), 1.0
        )


def ngram_strings(orders: list[Order], vocab: list[str]) -> list[list[str | None]]:
    """The space-joined words of every listed n-gram (None for pruned ones), order by order."""
    strings: list[list[str | None]] = [list(vocab)]
    for o in orders[1:]:
        prev = strings[-1]
        keep = o.keep.tolist() if o.keep is not None else [True] * len(o.count)
        strings.append(
            [
                f"{prev[c]} {vocab[w]}" if k else None
                for c, w, k in zip(o.context.tolist(), o.word.tolist(), keep, strict=True)
            ]
        )
    return strings


def write_arpa(orders: list[Order], vocab: list[str], handle: TextIO) -> list[int]:
    """Write the ARPA text; returns the number of n-grams per order."""
    strings = ngram_strings(orders, vocab)
    sizes = [sum(text is not None for text in s) for s in strings]
    handle.write("\\data\\\n")
    for n, size in enumerate(sizes, 1):
        handle.write(f"ngram {n}={size}\n")
    progress = Progress(total=sum(sizes), desc="write ARPA", unit="ngram", leave=False)
    for n, (o, words) in enumerate(zip(orders, strings, strict=True), 1):
        handle.write(f"\n\\{n}-grams:\n")
        logprob = np.full(len(o.prob), -99.0)
        positive = o.prob > 0
        logprob[positive] = np.log10(o.prob[positive])
        if n == 1:
            logprob[1] = -99.0
        last = n == len(orders)
        logbackoff = np.log10(o.backoff) if not last else None
        lines = []
        for i, text in enumerate(words):
            if text is None:
                continue
            if last:
                lines.append(f"{logprob[i]:.7g}\t{text}\n")
            else:
                lines.append(f"{logprob[i]:.7g}\t{text}\t{logbackoff[i]:.7g}\n")
        handle.writelines(lines)
        progress.update(len(lines))
    progress.close()
    handle.write("\n\\end\\\n")
    return sizes


def train_arpa(
    sentences: Iterable[str], order: int, handle: TextIO, prune_from: int | None = None
) -> dict[str, object]:
    """Estimate an order-`order` modified Kneser-Ney model and write it as ARPA to `handle`.

    `prune_from`: drop singleton n-grams of that order and above (None: keep all).
    """
    corpus = encode(sentences)
    if len(corpus.vocab) <= 3:
        raise ValueError("no words to train on")
    orders = count_orders(corpus, order)
    estimate(orders, len(corpus.vocab))
    if prune_from is not None and prune_from <= order:
        prune(orders, prune_from)
    sizes = write_arpa(orders, corpus.vocab, handle)
    return {
        "tokens": int(len(corpus.tokens) - 2 * np.count_nonzero(corpus.position == 0)),
        "sentences": int(np.count_nonzero(corpus.position == 0)),
        "vocab_size": len(corpus.vocab),
        "ngrams": sizes,
        "discounts": [list(map(float, o.discounts)) for o in orders],
    }
