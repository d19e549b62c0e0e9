"""Which component fills each slot of a phase (numpy).

A phase of a mixture is `num_batches` aligned global batches of `W` sequences; component k has
weight w_k (quantised to a_k / 10**12, so all quota arithmetic is exact integer arithmetic) and
target y_k(t) = w_k * t after t samples. The index guarantees, for every component,

* every prefix of t samples (t = 1, 2, ..., not only whole batches) holds C_k(t) sequences with
  |C_k(t) - y_k(t)| < 1, and
* every aligned global batch holds floor(w_k W) or ceil(w_k W) sequences (within 1 of its quota).

How. Copy g of component k (its g-th draw) may sit at a position p only inside its window
[rel(g), dl(g)]: rel(g) = the first t with y_k(t) > g - 1, dl(g) = the first t with y_k(t) >= g.
Any order that keeps every copy in its window meets the prefix bound, and one exists for any
weights (Tijdeman's chairman-assignment theorem). The batch bound fixes how many copies each batch
holds, so the sampler first chooses the cumulative counts B(k) at every batch boundary and then,
inside each batch, places the copies by earliest deadline first, which is exact for unit jobs with
release times. Hall's condition for one batch reduces to two conditions on the boundary states
alone (intervals inside a batch are covered by the global theorem):

* (P) after a boundary at T: for t in (T, T+W], #{components ahead at T, not yet caught up by t}
  <= Phi(t), where Phi(t) = sum_k frac(y_k(t)) is the number of components any valid state at t
  must round up;
* (R) before a boundary at T: for t in (T-W, T), #{components behind at T, already passed by t}
  <= Psi(t), the number of components a valid state at t rounds down.

A ceil given at a boundary keeps its component ahead until y catches up, which may be long
after the next batch, so (P) is checked to that catch-up; and since the batch bound lets a count
move by one per batch only, a component whose quota has a tiny fractional part stays ahead (or
behind) at every later boundary until its carried fraction catches up, so both capacities are also
checked at those boundaries, and Phi one step after each of them (where such a component is still
ahead). These are necessary conditions; with them dead ends are rare.

`boundaries.allocate_batches` walks the batches choosing which components get their ceil
(earliest batch deadline first) among the choices that pass the checks; when the first choice
fails it tries others (by cost, one from a bipartite matching of components to capacity slots, then
combinations), backtracking up to MAX_BACKTRACK batches on a dead end, and reports a deeper one
as a ScheduleError rather than weaken a bound (none in property and stress tests). `interleave`
runs the per-batch EDF.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WEIGHT_SCALE = 10**12
"""Weights are quantised to integers summing to this; all quota arithmetic is then exact. Decimal,
so weights written with up to 12 decimals (0.3, 0.125) are held exactly: a quota that is a whole
number of sequences is met exactly, not within 1."""

COMPONENT_DTYPE = np.int16

_CHUNK_SAMPLES = 1 << 22


class ScheduleError(RuntimeError):
    """No schedule meeting both bounds was found within the search limits (never seen in tests)."""


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


def _boundary_state(numer: np.ndarray, boundaries: np.ndarray, width: int) -> tuple:
    """floor(a_k T / SCALE) and its remainder at T = boundary * width, exactly in int64.

    b * (a_k W mod SCALE) would overflow, so b is split into 16-bit halves (b < 2**31)."""
    numer = numer.astype(np.int64)
    quota, rho = np.divmod(numer * width, WEIGHT_SCALE)
    b = np.asarray(boundaries, np.int64)[:, None]
    high, low = np.divmod(b, 1 << 16)
    q_high, r_high = np.divmod(high * rho, WEIGHT_SCALE)
    q_low, rem = np.divmod((r_high << 16) + low * rho, WEIGHT_SCALE)
    return b * quota + (q_high << 16) + q_low, rem


def _batch_tables(numer: np.ndarray, width: int, phi0: np.ndarray, rem: np.ndarray) -> tuple:
    """For batches starting with Phi = phi0 and remainders rem (one row per batch) and j = 1..K:
    the first step at which Phi drops below j (W + 1 if it stays >= j all batch), and the number
    of leading steps m for which Psi falls below j somewhere in [m, W) (from the step after it
    on, Psi >= j up to the boundary).

    floor(y_k(T + m)) = floor(y_k(T)) + floor(a_k m / SCALE) + carry, where the carry is a
    comparison of remainders, so each component costs two vector comparisons per step."""
    levels, count = numer.size, phi0.size
    steps = np.arange(1, width + 1, dtype=np.int64)
    whole, part = np.divmod(numer[None, :] * steps[:, None], WEIGHT_SCALE)  # (W, K)
    part = np.ascontiguousarray(part.T)
    phi = (phi0[:, None] + (steps - whole.sum(axis=1))[None, :]).astype(np.int16)
    active = np.flatnonzero(numer > 0)
    psi = np.full((count, width), active.size, dtype=np.int16)
    for k in active:
        gap = WEIGHT_SCALE - rem[:, k, None]  # y_k(T + m) passes an integer iff part >= gap
        np.subtract(phi, part[k][None, :] >= gap, out=phi, casting="unsafe")
        np.subtract(psi, part[k][None, :] == gap % WEIGHT_SCALE, out=psi, casting="unsafe")
    psi -= phi  # non-integer components minus those a valid state must round up
    psi[:, -1] = levels + 1  # t = T + W is the next boundary itself
    low = np.minimum.accumulate(phi, axis=1)  # non-increasing in m
    high = np.minimum.accumulate(psi[:, ::-1], axis=1)[:, ::-1]  # non-decreasing in m
    first_drop = np.ones((count, levels), dtype=np.int64)
    last_short = np.zeros((count, levels), dtype=np.int64)
    for j in range(1, levels + 1):
        first_drop[:, j - 1] += np.count_nonzero(low >= j, axis=1)
        last_short[:, j - 1] = np.count_nonzero(high < j, axis=1)
    return first_drop, last_short


def interleave(
    counts: np.ndarray,
    weights: Sequence[float] | np.ndarray,
    start: np.ndarray | None = None,
    chunk_samples: int = 1 << 23,
) -> tuple[np.ndarray, np.ndarray]:
    """Order every batch by earliest deadline first; returns (component, draw) per sample.

    `draw` is the component's running draw number (starting at `start[k]`), i.e. the position in
    that component's stream. All batches of a chunk advance in lockstep over the W positions."""
    counts = np.asarray(counts)
    num_batches, num_components = counts.shape
    width = int(counts[0].sum()) if num_batches else 0
    numer = quantize_weights(weights).astype(np.int64)
    if numer.size != num_components:
        raise ValueError(f"{numer.size} weights for {num_components} components")
    start = np.zeros(num_components, np.int64) if start is None else np.asarray(start, np.int64)
    before = np.cumsum(counts, axis=0, dtype=np.int64) - counts
    component = np.empty(num_batches * width, dtype=COMPONENT_DTYPE)
    draw = np.empty(num_batches * width, dtype=np.int64)
    never = np.iinfo(np.int64).max
    shift = max(1, int(num_components - 1).bit_length())  # key = deadline << shift | component
    scale = WEIGHT_SCALE
    step = max(1, chunk_samples // max(width, 1))
    for lo in range(0, num_batches, step):
        hi = min(lo + step, num_batches)
        rows = hi - lo
        # Component-major (K, rows) state, so the per-position minimum is K vector minima.
        floor, rem = _boundary_state(numer, np.arange(lo, hi), width)
        rem = np.ascontiguousarray(rem.T).reshape(-1)
        have = np.ascontiguousarray(counts[lo:hi].T, dtype=np.int64).reshape(-1)
        first = np.ascontiguousarray((before[lo:hi] - floor + 1).T).reshape(-1)
        a = np.repeat(np.maximum(numer, 1), rows)
        label = np.repeat(np.arange(num_components, dtype=np.int64), rows)
        # Windows relative to the batch start: release in [0, W], deadline capped at W + 1.
        release = np.maximum((first - 1) * scale - rem, -1) // a + 1
        deadline = np.minimum(-(-(first * scale - rem) // a), width + 1)
        release[have == 0] = never
        ready = (deadline << shift) | label
        placed = np.zeros(rows * num_components, np.int64)
        base = np.ascontiguousarray((before[lo:hi] + start).T).reshape(-1)
        column = np.arange(rows, dtype=np.int64)
        picks = np.empty((width, rows), dtype=COMPONENT_DTYPE)  # position-major: contiguous writes
        draws = np.empty((width, rows), dtype=np.int64)
        for pos in range(1, width + 1):
            key = np.where(release <= pos, ready, never).reshape(num_components, rows)
            best = np.minimum.reduce(key, axis=0)
            due = best >> shift
            if int(due.min()) < pos or int(best.max()) == never:
                raise ScheduleError(f"batch order infeasible at position {pos} (please report)")
            pick = best & ((1 << shift) - 1)
            flat = pick * rows + column
            picks[pos - 1] = pick
            done = placed[flat]
            draws[pos - 1] = base[flat] + done
            done += 1
            placed[flat] = done
            nxt = first[flat] + done
            ak = a[flat]
            rk = rem[flat]
            release[flat] = np.where(done < have[flat], ((nxt - 1) * scale - rk) // ak + 1, never)
            ready[flat] = (np.minimum(-(-(nxt * scale - rk) // ak), width + 1) << shift) | pick
        component.reshape(num_batches, width)[lo:hi] = picks.T
        draw.reshape(num_batches, width)[lo:hi] = draws.T
    return component, draw
