"""The duplicate graph in numpy: candidate edges from LSH buckets, and its connected components.

`large_star` / `small_star` are the two steps of the distributed algorithm of Kiveris
et al., "Connected Components in MapReduce and Beyond" (SoCC 2014): each looks only at the edges
keyed by one vertex, so a step runs on any hash partition of the edges, and alternating them
until the edge set stops changing leaves every component as a star around its smallest vertex.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.dedup.minhash import splitmix64

_SMALL_BUCKET = 16
"""Buckets up to this size are verified pair by pair; larger ones (mostly exact copies) against
their first member and their predecessor, which keeps the work linear and still connects them."""


def distinct_pairs(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (key, nbr) pairs, sorted by key then nbr."""
    if len(key) == 0:
        return key, nbr
    order = np.lexsort((nbr, key))
    key, nbr = key[order], nbr[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = (key[1:] != key[:-1]) | (nbr[1:] != nbr[:-1])
    return key[first], nbr[first]


def _group_min(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and, per key, min(key, smallest neighbour); key/nbr sorted by key."""
    starts, _ = _group_bounds(key)
    smallest = np.minimum(key[starts], np.minimum.reduceat(nbr, starts))
    return key[starts], smallest


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
    return distinct_pairs(np.minimum(u, v), np.maximum(u, v))


def orient_large(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Large-star input: every undirected edge keyed by both endpoints."""
    return np.concatenate([a, b]), np.concatenate([b, a])


def orient_small(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Small-star input: every undirected edge keyed by its larger endpoint."""
    return np.maximum(a, b), np.minimum(a, b)


def large_star(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key u with m = min(u, N(u)): connect every neighbour v > u to m."""
    key, nbr = distinct_pairs(key, nbr)
    if len(key) == 0:
        return key, nbr
    keys, smallest = _group_min(key, nbr)
    m = smallest[np.searchsorted(keys, key)]
    keep = nbr > key
    return nbr[keep], m[keep]


def small_star(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key u with smaller neighbours N'(u), m = min(N'(u)): connect N'(u) and u to m."""
    key, nbr = distinct_pairs(key, nbr)
    if len(key) == 0:
        return key, nbr
    keys, smallest = _group_min(key, nbr)
    m = smallest[np.searchsorted(keys, key)]
    src = np.concatenate([nbr, keys])
    dst = np.concatenate([m, smallest])
    keep = src != dst
    return src[keep], dst[keep]


def edge_fingerprint(key: np.ndarray, nbr: np.ndarray) -> tuple[int, int]:
    """(count, order-free hash) of a deduplicated edge set: equal sets give equal fingerprints."""
    key, nbr = distinct_pairs(*orient_small(key, nbr))
    mixed = splitmix64(key.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ nbr.view(np.uint64))
    return len(key), int(mixed.sum(dtype=np.uint64))
