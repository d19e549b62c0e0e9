"""Locality-sensitive hashing over MinHash signatures: (bands, rows) from a target Jaccard, band
keys, candidate pairs inside buckets, and verification by the signature Jaccard estimate.
"""

from __future__ import annotations

import functools

import numpy as np

from data_pipeline.dedup.minhash import EMPTY
from data_pipeline.dedup.text import _GOLDEN, splitmix64

_SMALL_BUCKET = 16
"""Buckets up to this size are verified pair by pair; larger ones (mostly exact copies) against
their first member and their predecessor, which keeps the work linear and still connects them."""


def _collision(similarity: np.ndarray, bands: int, rows: int) -> np.ndarray:
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


def _group_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(sorted_keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    starts = np.concatenate([[0], change]).astype(np.int64)
    ends = np.concatenate([change, [len(sorted_keys)]]).astype(np.int64)
    return starts, ends


def bucket_pairs(
    keys: np.ndarray, vertices: np.ndarray, small_bucket: int | None = _SMALL_BUCKET
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs of row positions sharing a key (rows sorted by (key, vertex)).

    Buckets up to `small_bucket` members give all their pairs (`None`: every bucket does); larger
    ones give (first, i) and (i - 1, i). Returns (left, right) row positions, left before right.
    """
    order = np.lexsort((vertices, keys))
    starts, ends = _group_bounds(keys[order])
    sizes = ends - starts
    lefts, rights = [], []
    limit = np.inf if small_bucket is None else small_bucket
    for size in np.unique(sizes[(sizes >= 2) & (sizes <= limit)]):
        first = starts[sizes == size]
        i, j = np.triu_indices(int(size), 1)
        lefts.append((first[:, None] + i[None, :]).ravel())
        rights.append((first[:, None] + j[None, :]).ravel())
    big = np.flatnonzero(sizes > limit)
    if len(big):
        members = np.concatenate([np.arange(starts[g] + 1, ends[g]) for g in big])
        heads = np.repeat(starts[big], sizes[big] - 1)
        lefts += [heads, members - 1]
        rights += [members, members]
    if not lefts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    left, right = np.concatenate(lefts), np.concatenate(rights)
    return order[left], order[right]


def candidate_edges(
    keys: np.ndarray, vertices: np.ndarray, small_bucket: int | None = _SMALL_BUCKET
) -> tuple[np.ndarray, np.ndarray]:
    """Unique candidate edges (u < v, vertex ids) between rows sharing a key."""
    left, right = bucket_pairs(keys, vertices, small_bucket)
    u, v = vertices[left], vertices[right]
    keep = u != v
    low, high = unique_edges(u[keep], v[keep])
    return low, high


def unique_edges(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges as (min, max) pairs, deduplicated and sorted."""
    low, high = np.minimum(u, v), np.maximum(u, v)
    if len(low) == 0:
        return low, high
    order = np.lexsort((high, low))
    low, high = low[order], high[order]
    first = np.ones(len(low), dtype=bool)
    first[1:] = (low[1:] != low[:-1]) | (high[1:] != high[:-1])
    return low[first], high[first]
