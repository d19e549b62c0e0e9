"""Text to MinHash signatures to LSH band keys, vectorised over whole Arrow batches (numpy).

Token hashes are a polynomial hash over a batch's UTF-8 bytes (prefix sums mod 2**64) mixed by
splitmix64; shingles are n-grams of token hashes (words, or characters for CJK). Each of the
`num_perm` hash functions is h(x) = ((a * x + b) mod 2**64) >> 32 over the 32-bit folded
shingle, odd random a, random b (Dietzfelbinger: strongly universal for 32-bit keys).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

_P = np.uint64(0x100000001B3)  # FNV prime: odd, so invertible mod 2**64
_P_INV = np.uint64(pow(0x100000001B3, -1, 2**64))
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

_FOLD_SPACE = r"[\t\n\f\r ]{2,}|[\t\n\f\r]"
"""Runs of RE2's whitespace class (tab, newline, form feed, carriage return, space) except a lone
space, which already is what a run becomes: the same text as replacing the pattern `\\s+`, about
3x faster (most whitespace is single spaces)."""

CJK_LANGS = ("zh", "ja", "ko", "yue", "wuu", "cmn", "lzh")
"""Languages shingled by characters (no spaces between words)."""


def splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, elementwise on a uint64 array (a bijection, good avalanche)."""
    z = values.astype(np.uint64, copy=True)
    z += _GOLDEN
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def _as_string_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    return values


def normalize_exact(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """NFKC, lower case, whitespace runs folded to one space, trimmed (nulls become "")."""
    texts = pc.fill_null(_as_string_array(texts).cast(pa.large_string()), "")
    texts = pc.utf8_lower(pc.utf8_normalize(texts, form="NFKC"))
    texts = pc.replace_substring_regex(texts, pattern=_FOLD_SPACE, replacement=" ")
    return pc.utf8_trim_whitespace(texts)


def normalize_shingles(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """NFKC, lower case, punctuation replaced by spaces (what word shingles are built on)."""
    texts = pc.fill_null(_as_string_array(texts).cast(pa.large_string()), "")
    texts = pc.utf8_lower(pc.utf8_normalize(texts, form="NFKC"))
    return pc.replace_substring_regex(texts, pattern=r"[^\p{L}\p{N}\p{M}\s]+", replacement="")


def exact_hashes(texts: pa.Array | pa.ChunkedArray) -> list[str]:
    """Hex xxh3-128 of each normalised text: equal iff the normalised texts are equal."""
    return [xxhash.xxh3_128_hexdigest(t) for t in normalize_exact(texts).to_pylist()]


def hash_strings(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 hash of each string of a (large_)string array, computed without a per-string loop."""
    values = _as_string_array(values)
    if values.type == pa.string():
        values = values.cast(pa.large_string())
    count = len(values)
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    offset_buf, data_buf = values.buffers()[1], values.buffers()[2]
    offsets = np.frombuffer(offset_buf, dtype=np.int64)[values.offset : values.offset + count + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)[start:end]
        if data_buf is not None
        else np.zeros(0, np.uint8)
    )
    rel = offsets - start
    powers = np.empty(len(data) + 1, dtype=np.uint64)
    powers[0] = 1
    if len(data):
        powers[1:] = _P
        np.cumprod(powers, out=powers)
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    weighted = data.astype(np.uint64)
    weighted += np.uint64(1)
    weighted *= powers[:-1]
    np.cumsum(weighted, out=prefix[1:])
    inv_powers = np.empty(len(data) + 1, dtype=np.uint64)
    inv_powers[0] = 1
    if len(data):
        inv_powers[1:] = _P_INV
        np.cumprod(inv_powers, out=inv_powers)
    raw = (prefix[rel[1:]] - prefix[rel[:-1]]) * inv_powers[rel[:-1]]
    lengths = np.diff(rel).astype(np.uint64)
    return splitmix64(raw ^ (lengths * _GOLDEN))


def word_tokens(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(token hashes, per-document offsets) of the words of each text.

    Text is split on whitespace, then each DISTINCT word of the batch is normalised once (NFKC,
    lower case, punctuation removed) and hashed; words that were only punctuation are dropped.
    """
    texts = _as_string_array(texts)
    lists = pc.utf8_split_whitespace(pc.fill_null(texts, ""))
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    flat = lists.values[int(offsets[0]) : int(offsets[-1])]
    offsets = offsets - offsets[0]
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64), offsets
    encoded = pc.dictionary_encode(flat)
    words = normalize_shingles(encoded.dictionary)
    words = pc.replace_substring_regex(words, pattern=r"\s+", replacement="")
    word_hashes = hash_strings(words)
    indices = np.asarray(encoded.indices, dtype=np.int64)
    nonempty = (np.asarray(pc.utf8_length(words)) > 0)[indices]
    if nonempty.all():
        return word_hashes[indices], offsets
    kept = np.zeros(len(nonempty) + 1, dtype=np.int64)
    np.cumsum(nonempty, out=kept[1:])
    return word_hashes[indices[nonempty]], kept[offsets]


def char_tokens(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(code point hashes, per-document offsets) of normalised text with whitespace removed."""
    cleaned = pc.replace_substring_regex(normalize_exact(texts), pattern=r"\s+", replacement="")
    points = [np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32) for t in cleaned.to_pylist()]
    counts = np.array([len(p) for p in points], dtype=np.int64)
    offsets = np.zeros(len(points) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = np.concatenate(points) if points else np.zeros(0, np.uint32)
    return splitmix64(flat.astype(np.uint64) ^ np.uint64(0xC3A5C85C97CB3127)), offsets


def is_cjk(langs: pa.Array | pa.ChunkedArray | None, count: int) -> np.ndarray:
    """Boolean mask of documents whose `lang` tag (may be null) names a CJK language."""
    if langs is None:
        return np.zeros(count, dtype=bool)
    base = pc.fill_null(pc.utf8_lower(_as_string_array(langs).cast(pa.string())), "")
    base = pc.replace_substring_regex(base, pattern=r"[-_].*$", replacement="")
    return np.asarray(pc.is_in(base, value_set=pa.array(CJK_LANGS)), dtype=bool)


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


def batch_shingles(
    texts: pa.Array | pa.ChunkedArray,
    langs: pa.Array | pa.ChunkedArray | None,
    word_ngram: int,
    char_ngram: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
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


def _counts(token_counts: np.ndarray, ngram_of: np.ndarray, cjk: np.ndarray) -> dict[str, Any]:
    """Documents with no shingles, tiny ones (fewer tokens than the n-gram), CJK ones."""
    tiny = (token_counts > 0) & (token_counts < ngram_of)
    return {"empty": int((token_counts == 0).sum()), "tiny": int(tiny.sum()), "cjk": int(cjk.sum())}


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


def _collision(similarity: np.ndarray, bands: int, rows: int | np.ndarray) -> np.ndarray:
    return 1.0 - (1.0 - similarity**rows) ** bands


@functools.lru_cache(maxsize=64)
def lsh_params(
    threshold: float,
    num_perm: int,
    false_positive_weight: float = 0.5,
    false_negative_weight: float = 0.5,
) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm minimising the weighted areas of false
    positives (collision probability below `threshold`) and false negatives (misses above it)."""
    below = np.linspace(0.0, threshold, 201)
    above = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        rows = np.arange(1, num_perm // bands + 1)[:, None]
        fp = np.trapezoid(_collision(below[None, :], bands, rows), below, axis=1)
        fn = np.trapezoid(1.0 - _collision(above[None, :], bands, rows), above, axis=1)
        error = false_positive_weight * fp + false_negative_weight * fn
        for r, value in enumerate(error.tolist(), start=1):  # first minimum wins, as before
            if best is None or value < best[0] - 1e-12:
                best = (value, bands, r)
    assert best is not None
    return best[1], best[2]


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(docs, bands) uint64 bucket keys; the band index is mixed in, so keys of different bands
    never meet. Rows of an empty document (no shingles) are all-EMPTY and must be skipped."""
    docs = signatures.shape[0]
    keys = np.zeros((docs, bands), dtype=np.uint64)
    for r in range(rows):
        column = signatures[:, r : bands * rows : rows].astype(np.uint64)
        keys = splitmix64(keys ^ column)
    band_ids = np.arange(bands, dtype=np.uint64) * _GOLDEN
    return splitmix64(keys ^ band_ids[None, :])


def has_shingles(signatures: np.ndarray) -> np.ndarray:
    return ~(signatures == EMPTY).all(axis=1)
