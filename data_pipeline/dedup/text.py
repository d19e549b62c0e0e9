"""Text normalisation and vectorised hashing for dedup.

Everything here works on whole Arrow columns: the only Python loops are per document (the exact
hash, CJK code points), never per token or per shingle. Token hashes are a polynomial hash over the
UTF-8 bytes of a whole batch computed with prefix sums (mod 2**64), then mixed with splitmix64.
"""

from __future__ import annotations

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
