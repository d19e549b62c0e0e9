"""The global-quota sampler: plain numpy, no Ray or Megatron.

A phase of a mixture is `num_batches` aligned global batches of `W` sequences. Component k's quota
per batch is q_k = w_k * W. The sampler decides, batch by batch, how many sequences each component
gets: every component gets floor(q_k) and the r = W - sum floor(q_k) remaining slots go, one each,
to components chosen by earliest deadline (the batch at which the component's carried deficit would
reach a whole sequence), ties to the larger deficit. Deficits are exact integers (weights are
quantised to multiples of 2**-40), so for every aligned batch each component holds floor(q_k) or
ceil(q_k) sequences (within 1 of its quota) and after every batch its cumulative count is within
1 of w_k * sequences-so-far (carried deficit). Within a batch the components are interleaved evenly,
so sliding windows stay close to target as well.

Each component is a stream of sequences: draw n of component k is sequence `n % S_k` of epoch
`n // S_k` (S_k = sequences per epoch), and the order of sequences is a seeded permutation per
(seed, phase, component, epoch). `mixtures.dataset` defines what a sequence's tokens are.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

WEIGHT_SCALE = 1 << 40
"""Weights are quantised to integers summing to this; all quota arithmetic is then exact."""

COMPONENT_DTYPE = np.int16
INDEX_DTYPE = np.dtype([("component", "<i2"), ("sequence", "<i8")])
"""One sample of the index: which component, and which sequence of that component's stream."""


def quantize_weights(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Integer numerators over WEIGHT_SCALE (largest remainder), summing exactly to it."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
        raise ValueError(f"weights must be a non-empty vector of finite values >= 0, got {w}")
    scaled = w / w.sum() * WEIGHT_SCALE
    base = np.floor(scaled).astype(np.int64)
    short = WEIGHT_SCALE - int(base.sum())
    order = np.lexsort((np.arange(w.size), -(scaled - base)))
    base[order[:short]] += 1
    return base


def allocate_batches(
    weights: Sequence[float] | np.ndarray, num_batches: int, global_batch: int
) -> np.ndarray:
    """Per-batch sequence counts, shape (num_batches, K), rows summing to `global_batch`."""
    if global_batch < 1 or num_batches < 0:
        raise ValueError(
            f"global_batch must be >= 1 and num_batches >= 0, got {global_batch}, {num_batches}"
        )
    numer = [int(a) * global_batch for a in quantize_weights(weights)]
    base = np.array([n // WEIGHT_SCALE for n in numer], dtype=np.int64)
    frac = [n % WEIGHT_SCALE for n in numer]
    extras = global_batch - int(base.sum())
    counts = np.empty((num_batches, len(numer)), dtype=np.int32)
    counts[:] = base
    if extras == 0:
        return counts
    live = [k for k, f in enumerate(frac) if f > 0]
    deficit = {k: 0 for k in live}
    for batch in range(num_batches):
        candidates = []
        for k in live:
            deficit[k] += frac[k]
            if deficit[k] > 0:
                # Rounds until the deficit reaches one whole sequence if k is not served now.
                deadline = (WEIGHT_SCALE - deficit[k] + frac[k] - 1) // frac[k]
                candidates.append((deadline, -deficit[k], k))
        chosen = heapq.nsmallest(extras, candidates)
        if len(chosen) < extras:  # pragma: no cover - impossible while the invariant holds
            raise AssertionError("quota invariant broken: not enough eligible components")
        for _, _, k in chosen:
            deficit[k] -= WEIGHT_SCALE
            counts[batch, k] += 1
    return counts


def _interleave_pattern(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Evenly interleave one batch: component k's j-th slot sorts at (j + 0.5) / c_k."""
    comps = np.repeat(np.arange(row.size, dtype=COMPONENT_DTYPE), row)
    ranks = np.concatenate([np.arange(c, dtype=np.int64) for c in row]) if row.size else comps
    keys = (ranks + 0.5) / np.maximum(row[comps], 1)
    order = np.lexsort((comps, keys))
    return comps[order], ranks[order]


def interleave(
    counts: np.ndarray, start: np.ndarray | None = None, chunk_batches: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Expand per-batch counts to (component, draw) per sample.

    `draw` is the component's running draw number (starting at `start[k]`), i.e. the position in
    that component's stream. Batches with identical count rows share one interleave pattern.
    """
    num_batches, num_components = counts.shape
    width = int(counts[0].sum()) if num_batches else 0
    start = np.zeros(num_components, np.int64) if start is None else np.asarray(start, np.int64)
    rows, pattern_of = np.unique(counts, axis=0, return_inverse=True)
    pattern_of = pattern_of.reshape(-1)
    patterns = [_interleave_pattern(row) for row in rows]
    pat_comp = np.stack([p[0] for p in patterns]) if patterns else np.zeros((0, width), np.int16)
    pat_rank = np.stack([p[1] for p in patterns]) if patterns else np.zeros((0, width), np.int64)
    before = np.cumsum(counts, axis=0, dtype=np.int64) - counts + start
    component = np.empty((num_batches, width), dtype=COMPONENT_DTYPE)
    draw = np.empty((num_batches, width), dtype=np.int64)
    for lo in range(0, num_batches, chunk_batches):
        hi = min(lo + chunk_batches, num_batches)
        pid = pattern_of[lo:hi]
        for pattern in np.unique(pid):
            rows = lo + np.flatnonzero(pid == pattern)
            cols = pat_comp[pattern]
            component[rows] = cols
            draw[rows] = before[rows][:, cols] + pat_rank[pattern]
    return component.reshape(-1), draw.reshape(-1)


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
    """Map each (component, draw) to the sequence id `epoch * S_k + permuted position`.

    `draw_limits[k]` bounds component k's draw numbers (exclusive). One lookup table holds every
    component's stream up to its limit, so the mapping is a chunked gather over the index.
    """
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
    weights: Sequence[float] | np.ndarray,
    num_batches: int,
    global_batch: int,
    sequences_per_epoch: Sequence[int],
    seed: int,
    phase: int = 0,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """The phase's sample index (structured INDEX_DTYPE array of num_batches * W samples)."""
    counts = allocate_batches(weights, num_batches, global_batch)
    component, draw = interleave(counts, start)
    limits = counts.sum(axis=0) + (0 if start is None else np.asarray(start, np.int64))
    index = np.empty(component.size, dtype=INDEX_DTYPE)
    index["component"] = component
    draws_to_sequences(
        component, draw, sequences_per_epoch, seed, phase, limits, out=index["sequence"]
    )
    return index


def replan_index(
    old_index: np.ndarray,
    consumed: int,
    weights: Sequence[float] | np.ndarray,
    num_batches: int,
    global_batch: int,
    sequences_per_epoch: Sequence[int],
    seed: int,
    phase: int = 0,
) -> np.ndarray:
    """Keep the first `consumed` samples of `old_index`, re-allocate `num_batches` more batches.

    Each component's stream continues after the draws the kept prefix made, so no consumed
    sequence is drawn again before its epoch is exhausted; `consumed` must be whole batches.
    """
    if consumed % global_batch or consumed > old_index.size:
        raise ValueError(
            f"consumed={consumed} must be a multiple of global_batch={global_batch} "
            f"and at most {old_index.size}"
        )
    prefix = old_index[:consumed]
    start = np.bincount(prefix["component"], minlength=len(sequences_per_epoch)).astype(np.int64)
    rest = build_index(weights, num_batches, global_batch, sequences_per_epoch, seed, phase, start)
    return np.concatenate([prefix, rest])


def draws_per_component(index: np.ndarray, num_components: int) -> np.ndarray:
    """Number of samples of each component in an index."""
    return np.bincount(index["component"], minlength=num_components).astype(np.int64)


def batch_counts(component: np.ndarray, num_components: int, global_batch: int) -> np.ndarray:
    """(num_batches, K) counts of each component per aligned global batch."""
    num_batches = component.size // global_batch
    flat = np.arange(num_batches).repeat(global_batch) * num_components
    flat += component[: num_batches * global_batch]
    counts = np.bincount(flat, minlength=num_batches * num_components)
    return counts.reshape(num_batches, num_components)


def max_batch_deviation(
    component: np.ndarray, weights: Sequence[float] | np.ndarray, global_batch: int
) -> float:
    """Largest |count - w_k * W| over aligned batches and components, in sequences."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    counts = batch_counts(component, w.size, global_batch)
    return float(np.abs(counts - w * global_batch).max()) if counts.size else 0.0


def max_prefix_deviation(
    component: np.ndarray, weights: Sequence[float] | np.ndarray, global_batch: int
) -> float:
    """Largest |cumulative count - w_k * n| at every aligned batch boundary n, in sequences."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    counts = batch_counts(component, w.size, global_batch)
    if not counts.size:
        return 0.0
    cum = np.cumsum(counts, axis=0)
    seen = np.arange(1, counts.shape[0] + 1)[:, None] * global_batch
    return float(np.abs(cum - w * seen).max())


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


def max_sample_prefix_deviation(
    component: np.ndarray, weights: Sequence[float] | np.ndarray
) -> float:
    """Largest |cumulative count - w_k * n| over every prefix length n (not only whole batches)."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    seen = np.arange(1, component.size + 1, dtype=np.float64)
    worst = 0.0
    for k in range(w.size):
        hits = np.cumsum(component == k, dtype=np.int64)
        worst = max(worst, float(np.abs(hits - w[k] * seen).max(initial=0.0)))
    return worst
