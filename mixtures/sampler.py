"""A phase's sample index, (component, sequence) per slot, and the deviations the report measures.

`mixtures.schedule` decides which component fills each slot. Draw n of component k is sequence
`n % S_k` of epoch `n // S_k` (S_k = sequences per epoch) in a seeded permutation per (seed,
phase, component, epoch); `mixtures.dataset` defines a sequence's tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mixtures.schedule import interleave

CHUNK_BATCHES = 1 << 14
INDEX_DTYPE = np.dtype([("component", "<i2"), ("sequence", "<i8")])
"""One sample of the index: which component, and which sequence of that component's stream."""


def epoch_permutation(seed: int, phase: int, component: int, epoch: int, size: int) -> np.ndarray:
    """The seeded order of a component's `size` sequences in one epoch."""
    rng = np.random.default_rng([seed, phase, component, epoch])
    return rng.permutation(size).astype(np.int64)


def draws_to_sequences(
    component: np.ndarray,
    draw: np.ndarray,
    sequences_per_epoch: Sequence[int],
    seed: int,
    phase: int,
    draw_limits: Sequence[int] | np.ndarray,
    out: np.ndarray | None = None,
    chunk: int = 1 << 22,
) -> np.ndarray:
    """Each (component, draw) as the sequence id `epoch * S_k + permuted position`, through one
    table of every component's stream up to `draw_limits[k]` (exclusive)."""
    limits = [int(limit) for limit in draw_limits]
    table = np.empty(sum(limits), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(limits)[:-1]]).astype(np.int64)
    for k, (size, limit) in enumerate(zip(sequences_per_epoch, limits, strict=True)):
        if limit and size < 1:
            raise ValueError(f"component {k} has no sequences but is drawn from")
        for epoch in range(-(-limit // size) if limit else 0):
            lo = epoch * size
            take = min(size, limit - lo)
            perm = epoch_permutation(seed, phase, k, epoch, int(size))[:take]
            table[offsets[k] + lo : offsets[k] + lo + take] = perm + lo
    out = np.empty(draw.size, dtype=np.int64) if out is None else out
    for lo in range(0, draw.size, chunk):
        hi = min(lo + chunk, draw.size)
        out[lo:hi] = table[offsets[component[lo:hi]] + draw[lo:hi]]
    return out


def build_index(
    counts: np.ndarray,
    weights: Sequence[float] | np.ndarray,
    sequences_per_epoch: Sequence[int],
    seed: int,
    phase: int = 0,
    kept: np.ndarray | None = None,
) -> np.ndarray:
    """The phase's sample index (INDEX_DTYPE) of the batches `counts` allocates, after the `kept`
    prefix of a re-plan when given: each stream continues after the kept prefix's draws, so no
    consumed sequence is drawn again before its epoch is exhausted."""
    start = None if kept is None else draws_per_component(kept, len(sequences_per_epoch))
    component, draw = interleave(counts, weights, start)
    limits = counts.sum(axis=0) + (0 if start is None else start)
    index = np.empty(component.size, dtype=INDEX_DTYPE)
    index["component"] = component
    draws_to_sequences(
        component, draw, sequences_per_epoch, seed, phase, limits, out=index["sequence"]
    )
    return index if kept is None else np.concatenate([np.asarray(kept), index])


def draws_per_component(index: np.ndarray, num_components: int) -> np.ndarray:
    """Number of samples of each component in an index."""
    return np.bincount(index["component"], minlength=num_components).astype(np.int64)


def batch_counts(component: np.ndarray, num_components: int, global_batch: int) -> np.ndarray:
    """(num_batches, K) counts of each component per aligned global batch, in chunks of
    CHUNK_BATCHES batches so memory beyond the result stays bounded (an index may be mmapped)."""
    num_batches = component.size // global_batch
    counts = np.empty((num_batches, num_components), dtype=np.int64)
    for lo in range(0, num_batches, CHUNK_BATCHES):
        hi = min(lo + CHUNK_BATCHES, num_batches)
        flat = np.arange(hi - lo).repeat(global_batch) * num_components
        flat += np.asarray(component[lo * global_batch : hi * global_batch])
        chunk = np.bincount(flat, minlength=(hi - lo) * num_components)
        counts[lo:hi] = chunk.reshape(hi - lo, num_components)
    return counts


def batch_deviations(
    counts: np.ndarray, weights: Sequence[float] | np.ndarray, global_batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per component, in sequences, from `batch_counts`: the largest |count - w_k * W| over
    aligned batches, and the largest |cumulative count - w_k * n| at every batch boundary n."""
    w = np.asarray(weights, np.float64)
    if not counts.size:
        return np.zeros_like(w), np.zeros_like(w)
    seen = np.arange(1, counts.shape[0] + 1)[:, None] * global_batch
    prefix = np.abs(np.cumsum(counts, axis=0) - w * seen).max(axis=0)
    return np.abs(counts - w * global_batch).max(axis=0), prefix


def max_window_deviation(
    component: np.ndarray, weights: Sequence[float] | np.ndarray, window: int
) -> float:
    """Largest |count - w_k * window| over all sliding windows of `window` samples."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    worst = 0.0
    for k in range(w.size):
        hits = np.concatenate([[0], np.cumsum(component == k, dtype=np.int64)])
        if hits.size <= window:
            continue
        sums = hits[window:] - hits[:-window]
        worst = max(worst, float(np.abs(sums - w[k] * window).max()))
    return worst


def sample_prefix_deviations(
    component: np.ndarray, weights: Sequence[float] | np.ndarray, chunk: int = 1 << 22
) -> np.ndarray:
    """Per component, the largest |cumulative count - w_k * n| over every prefix length n."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    carry = np.zeros(w.size, np.int64)
    worst = np.zeros(w.size, np.float64)
    for lo in range(0, component.size, chunk):
        part = np.asarray(component[lo : lo + chunk])
        seen = np.arange(lo + 1, lo + part.size + 1, dtype=np.float64)
        for k in range(w.size):
            hits = carry[k] + np.cumsum(part == k, dtype=np.int64)
            worst[k] = max(worst[k], float(np.abs(hits - w[k] * seen).max(initial=0.0)))
            carry[k] = hits[-1] if hits.size else carry[k]
    return worst
