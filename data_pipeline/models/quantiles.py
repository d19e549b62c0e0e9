"""A mergeable streaming quantile sketch for perplexities: fixed log-space histograms per key.

Each worker histograms its batches into fixed bins of log10(value) (default 1,000 bins per decade
over 10^0 .. 10^8: a bin is 0.23% wide, so a quantile is exact to within 0.23% of its value);
partial sketches merge by adding counts, so the result is identical for any partitioning, worker
count or merge order (unlike t-digest or KLL, whose answers depend on arrival order). Memory is
bounded by keys x bins (8,000 int64 = 64 KB per language), whatever the corpus size.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class LogHistogramSketch:
    """Per-key fixed-bin histograms of log10(value); `add`, `merge`, `quantile`."""

    def __init__(
        self, bins_per_decade: int = 1000, low_decade: int = 0, high_decade: int = 8
    ) -> None:
        self.bins_per_decade = bins_per_decade
        self.low = low_decade
        self.num_bins = (high_decade - low_decade) * bins_per_decade
        self.counts: dict[str, np.ndarray] = {}

    def bin_of(self, values: np.ndarray) -> np.ndarray:
        """Bin index of each value (values below / above the range go to the end bins)."""
        logs = np.log10(np.maximum(values.astype(np.float64), 1e-300))
        index = np.floor((logs - self.low) * self.bins_per_decade).astype(np.int64)
        return np.clip(index, 0, self.num_bins - 1)

    def add(self, key: str, values: Iterable[float] | np.ndarray) -> None:
        array = np.asarray(
            values if isinstance(values, np.ndarray) else list(values), dtype=np.float64
        )
        array = array[np.isfinite(array)]
        if not len(array):
            return
        counts = np.bincount(self.bin_of(array), minlength=self.num_bins)
        self.add_counts(key, np.arange(self.num_bins)[counts > 0], counts[counts > 0])

    def add_counts(self, key: str, bins: np.ndarray, counts: np.ndarray) -> None:
        """Add sparse (bin, count) pairs, e.g. a partial sketch from a worker."""
        target = self.counts.setdefault(key, np.zeros(self.num_bins, dtype=np.int64))
        np.add.at(target, np.asarray(bins, dtype=np.int64), np.asarray(counts, dtype=np.int64))

    def merge(self, other: LogHistogramSketch) -> None:
        for key, counts in other.counts.items():
            nonzero = np.flatnonzero(counts)
            self.add_counts(key, nonzero, counts[nonzero])

    def sparse(self) -> list[tuple[str, int, int]]:
        """(key, bin, count) for every non-empty bin: the wire format between workers."""
        rows = []
        for key, counts in sorted(self.counts.items()):
            rows.extend((key, int(b), int(counts[b])) for b in np.flatnonzero(counts))
        return rows

    def total(self, key: str) -> int:
        return int(self.counts[key].sum()) if key in self.counts else 0

    def quantile(self, key: str, q: float) -> float | None:
        """Value at quantile q in [0, 1], interpolated geometrically inside its bin."""
        counts = self.counts.get(key)
        if counts is None or not counts.sum():
            return None
        cumulative = np.cumsum(counts)
        rank = q * cumulative[-1]
        index = int(np.searchsorted(cumulative, rank, side="left"))
        index = min(index, self.num_bins - 1)
        before = cumulative[index - 1] if index else 0
        inside = (rank - before) / counts[index] if counts[index] else 0.0
        log_value = self.low + (index + min(max(inside, 0.0), 1.0)) / self.bins_per_decade
        return float(10**log_value)
