"""Vectorised shingling and MinHash signatures over whole batches (numpy, no per-shingle loops).

Shingles are n-grams of token hashes (words, or characters for CJK), combined with fixed random
odd multipliers and mixed by splitmix64. Each of the `num_perm` hash functions is the
multiply-add-shift family h(x) = ((a * x + b) mod 2**64) >> 32 over the 32-bit folded shingle,
with odd random 64-bit a and random b (Dietzfelbinger: strongly universal for 32-bit keys); the
signature is the minimum over a document's shingles, computed as one matrix op per chunk of
shingles and `np.minimum.reduceat` over document segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from data_pipeline.dedup.text import char_tokens, is_cjk, splitmix64, word_tokens

EMPTY = np.uint32(0xFFFFFFFF)
"""Signature value of a document with no shingles (it never matches anything)."""
_CHUNK = 2048
"""Shingles per matrix block: 2048 x 128 uint64 = 2 MiB, about one L2 cache."""
_NGRAM_SEED = 0x5EED


def _ngram_multipliers(n: int) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(_NGRAM_SEED))
    return rng.integers(1, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def ngram_shingles(
    tokens: np.ndarray, offsets: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Hash every n-gram of consecutive tokens inside each document.

    `tokens` are uint64 token hashes of all documents back to back, `offsets` (len docs + 1) their
    boundaries. A document with fewer than n tokens (but at least one) gets one shingle made of all
    its tokens; an empty document gets none. Returns (shingle hashes, shingle offsets).
    """
    counts = np.diff(offsets)
    total = len(tokens)
    mult = _ngram_multipliers(n)
    combined = np.zeros(total, dtype=np.uint64)
    padded = np.concatenate([tokens, np.zeros(n - 1, dtype=np.uint64)])
    term = np.empty(total, dtype=np.uint64)
    for m in range(n):
        np.multiply(padded[m : m + total], mult[m], out=term)
        combined += term
    doc_of = np.repeat(np.arange(len(counts)), counts)
    position = np.arange(total) - offsets[:-1][doc_of]
    valid = position + n <= counts[doc_of]
    tiny = (counts > 0) & (counts < n)
    if tiny.any():
        tiny_tok = tiny[doc_of]
        contrib = tokens[tiny_tok] * mult[position[tiny_tok]]
        starts = np.zeros(int(tiny.sum()), dtype=np.int64)
        np.cumsum(counts[tiny][:-1], out=starts[1:])
        sums = np.add.reduceat(contrib, starts)
        first = offsets[:-1][tiny]
        combined[first] = sums ^ (counts[tiny].astype(np.uint64) << np.uint64(56))
        valid[first] = True
    shingle_counts = np.where(counts >= n, counts - n + 1, tiny.astype(np.int64))
    shingle_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(shingle_counts, out=shingle_offsets[1:])
    return splitmix64(combined[valid]), shingle_offsets


@dataclass(frozen=True)
class ShingleCounts:
    """Per-batch counts a report shows: documents with no shingles, tiny ones, CJK ones."""

    empty: int
    tiny: int
    cjk: int


def batch_shingles(
    texts: pa.Array | pa.ChunkedArray,
    langs: pa.Array | pa.ChunkedArray | None,
    word_ngram: int,
    char_ngram: int,
) -> tuple[np.ndarray, np.ndarray, ShingleCounts]:
    """Shingle a batch: word n-grams, or character n-grams for documents tagged CJK by `lang`."""
    count = len(texts)
    cjk = is_cjk(langs, count)
    token_counts = np.zeros(count, dtype=np.int64)
    ngram_of = np.where(cjk, char_ngram, word_ngram)
    pieces, owners = [], []
    for mask, tokenizer, n in ((~cjk, word_tokens, word_ngram), (cjk, char_tokens, char_ngram)):
        rows = np.flatnonzero(mask)
        if not len(rows):
            continue
        part = texts.take(pa.array(rows)) if len(rows) < count else texts
        tokens, offsets = tokenizer(part)
        token_counts[rows] = np.diff(offsets)
        hashed, shingle_offsets = ngram_shingles(tokens, offsets, n)
        if len(rows) == count:
            return hashed, shingle_offsets, _counts(token_counts, ngram_of, cjk)
        pieces.append(hashed)
        owners.append(np.repeat(rows, np.diff(shingle_offsets)))
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    order = np.argsort(owner, kind="stable")
    shingles = np.concatenate(pieces)[order] if pieces else np.zeros(0, np.uint64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=count), out=offsets[1:])
    return shingles, offsets, _counts(token_counts, ngram_of, cjk)


def _counts(token_counts: np.ndarray, ngram_of: np.ndarray, cjk: np.ndarray) -> ShingleCounts:
    return ShingleCounts(
        empty=int((token_counts == 0).sum()),
        tiny=int(((token_counts > 0) & (token_counts < ngram_of)).sum()),
        cjk=int(cjk.sum()),
    )


def fold32(shingles: np.ndarray) -> np.ndarray:
    """The 32-bit shingle values the permutations hash (and exact verification compares)."""
    return ((shingles ^ (shingles >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


class MinHasher:
    """`num_perm` seeded hash functions; `signatures` maps shingle hashes to uint32 signatures."""

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        rng = np.random.Generator(np.random.PCG64(seed))
        self.num_perm = num_perm
        odd = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
        self.a = odd * np.uint64(2) + np.uint64(1)
        self.b = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)

    def signatures(self, shingles: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """(docs, num_perm) uint32 minima; documents without shingles get all `EMPTY`."""
        docs = len(offsets) - 1
        sig = np.full((docs, self.num_perm), EMPTY, dtype=np.uint32)
        counts = np.diff(offsets)
        nonempty = np.flatnonzero(counts > 0)
        starts, ends = offsets[nonempty], offsets[nonempty + 1]
        folded = fold32(shingles).astype(np.uint64)
        block = np.empty((_CHUNK, self.num_perm), dtype=np.uint64)
        high = np.empty((_CHUNK, self.num_perm), dtype=np.uint32)
        for lo in range(0, len(shingles), _CHUNK):
            hi = min(len(shingles), lo + _CHUNK)
            first = np.searchsorted(ends, lo, side="right")
            last = np.searchsorted(starts, hi, side="left")
            view, top = block[: hi - lo], high[: hi - lo]
            np.multiply(folded[lo:hi, None], self.a[None, :], out=view)
            view += self.b
            np.right_shift(view, np.uint64(32), out=top, casting="unsafe")
            bounds = np.append(np.maximum(starts[first:last], lo) - lo, hi - lo)
            rows = nonempty[first:last]
            sig[rows] = np.minimum(sig[rows], _segment_min(top, bounds))
        return sig


def _segment_min(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Column minima of each row segment [bounds[i], bounds[i + 1]).

    `ndarray.min` is SIMD-vectorised and `ufunc.reduceat` is not, so long segments are reduced
    one by one and many short ones by a single `reduceat`.
    """
    if len(bounds) <= 2 or bounds[-1] >= 64 * (len(bounds) - 1):  # segments of >= 64 rows
        return np.stack([values[s:e].min(axis=0) for s, e in zip(bounds[:-1], bounds[1:])])
    return np.minimum.reduceat(values[: bounds[-1]], bounds[:-1], axis=0)


def jaccard_estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Share of equal signature positions, row by row (0 when either side is empty)."""
    equal = (sig_a == sig_b).mean(axis=1)
    empty = (sig_a[:, 0] == EMPTY) & (sig_a == EMPTY).all(axis=1)
    empty |= (sig_b == EMPTY).all(axis=1)
    return np.where(empty, 0.0, equal)
