"""Connected components of the duplicate graph, in numpy.

`large_star` / `small_star` are the two steps of the distributed algorithm of Kiveris
et al., "Connected Components in MapReduce and Beyond" (SoCC 2014): each looks only at the edges
keyed by one vertex, so a step runs on any hash partition of the edges, and alternating them
until the edge set stops changing leaves every component as a star around its smallest vertex.
"""

from __future__ import annotations

import numpy as np

from data_pipeline.dedup.text import splitmix64


def _dedup_pairs(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(key) == 0:
        return key, nbr
    order = np.lexsort((nbr, key))
    key, nbr = key[order], nbr[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = (key[1:] != key[:-1]) | (nbr[1:] != nbr[:-1])
    return key[first], nbr[first]


def _group_min(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and, per key, min(key, smallest neighbour); key/nbr sorted by key."""
    change = np.flatnonzero(key[1:] != key[:-1]) + 1
    starts = np.concatenate([[0], change])
    smallest = np.minimum(key[starts], np.minimum.reduceat(nbr, starts))
    return key[starts], smallest


def orient_large(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Large-star input: every undirected edge keyed by both endpoints."""
    return np.concatenate([a, b]), np.concatenate([b, a])


def orient_small(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Small-star input: every undirected edge keyed by its larger endpoint."""
    return np.maximum(a, b), np.minimum(a, b)


def large_star(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key u with m = min(u, N(u)): connect every neighbour v > u to m."""
    key, nbr = _dedup_pairs(key, nbr)
    if len(key) == 0:
        return key, nbr
    keys, smallest = _group_min(key, nbr)
    m = smallest[np.searchsorted(keys, key)]
    keep = nbr > key
    return nbr[keep], m[keep]


def small_star(key: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each key u with smaller neighbours N'(u), m = min(N'(u)): connect N'(u) and u to m."""
    key, nbr = _dedup_pairs(key, nbr)
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
    key, nbr = _dedup_pairs(*orient_small(key, nbr))
    mixed = splitmix64(key.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ nbr.view(np.uint64))
    return len(key), int(mixed.sum(dtype=np.uint64))
