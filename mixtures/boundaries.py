"""Choosing the cumulative counts at every batch boundary (`allocate_batches`).

The conditions checked here, and why they are the right ones, are in `mixtures.schedule`'s
docstring; the per-batch order is `schedule.interleave`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np

from mixtures.schedule import (
    _CHUNK_SAMPLES,
    WEIGHT_SCALE,
    ScheduleError,
    _batch_tables,
    _boundary_state,
    quantize_weights,
)

MAX_BACKTRACK = 256
"""Batches the boundary search may step back; a deeper dead end is reported, never papered over."""
MAX_CHOICES = 512
"""Alternative ceil-sets tried per boundary before stepping back."""
_NEVER = np.iinfo(np.int64).max


def _next_below(values: np.ndarray, levels: int) -> np.ndarray:
    """[n, j-1] = (the first n' > n with values[n'] < j) - n, or _NEVER; for j = 1..levels."""
    count = values.size
    index = np.arange(count, dtype=np.int64)
    out = np.full((count, levels), _NEVER, dtype=np.int64)
    for j in range(1, levels + 1):
        hit = np.where(values < j, index, _NEVER)
        after = np.minimum.accumulate(hit[::-1])[::-1]  # first hit at or after n
        out[:-1, j - 1] = np.where(after[1:] == _NEVER, _NEVER, after[1:] - index[:-1])
    return out


class _BoundaryPlanner:
    """Chooses the cumulative counts at every batch boundary (see the module docstring)."""

    def __init__(self, numer: np.ndarray, width: int, num_batches: int) -> None:
        self.numer = [int(a) for a in numer]
        self.key = tuple(self.numer)
        self.width = width
        self.num_batches = num_batches
        self.quota = [a * width // WEIGHT_SCALE for a in self.numer]
        self.fractional = [(a * width) % WEIGHT_SCALE != 0 for a in self.numer]
        self.extras = width - sum(self.quota)
        self.chunk = max(1, _CHUNK_SAMPLES // width)
        levels = len(self.numer)
        numer_arr = np.asarray(self.numer, np.int64)
        self.numer_arr = numer_arr
        # floor and remainder of y_k at every boundary, and Phi / Psi there.
        self.floor, self.rem = _boundary_state(numer_arr, np.arange(num_batches + 1), width)
        floor, rem = self.floor, self.rem
        phi = np.arange(num_batches + 1, dtype=np.int64) * width - floor.sum(axis=1)
        psi = ((rem != 0) & (numer_arr > 0)).sum(axis=1) - phi
        # drop[k, j-1]: the first step t > k * W at which Phi(t) < j, for the whole phase (a ceil
        # holds its component ahead until y catches up, however far away); short[k, j-1]: the
        # last step of batch k (from its start) after which Psi stays >= j up to the boundary.
        drop = np.full((num_batches + 1, levels), _NEVER, dtype=np.int64)
        self.short = np.zeros((num_batches, levels), dtype=np.int64)
        for first in range(0, num_batches, self.chunk):
            part = slice(first, min(first + self.chunk, num_batches))
            first_drop, last_short = _batch_tables(numer_arr, width, phi[part], rem[part])
            starts = np.arange(part.start, part.stop, dtype=np.int64)[:, None] * width
            drop[part] = np.where(first_drop <= width, starts + first_drop, _NEVER)
            self.short[part] = last_short
        self.drop = np.minimum.accumulate(drop[::-1], axis=0)[::-1]
        # The same two capacities at batch boundaries only, where the batch bound can hold a
        # component ahead (or behind) for many batches: a component whose quota has a tiny
        # fractional part stays ahead at every boundary until its carried fraction catches up.
        # lag_up[n, j-1] / lag_down[n, j-1]: boundaries after n until Phi / Psi first < j.
        self.lag_up = _next_below(phi, levels)
        self.lag_down = _next_below(psi, levels)
        # And one step after each boundary, where a component held ahead by its batch quota is
        # still ahead (it catches up only during the batch): Phi(T_n + 1), n < num_batches.
        carry = ((rem[:-1] + numer_arr) >= WEIGHT_SCALE) & (numer_arr > 0)
        phi_next = np.append(phi[:-1] + 1 - carry.sum(axis=1), levels + 1)
        self.lag_next = _next_below(phi_next, levels)
        self._cache: dict = {}

    def _rows(self, batch: int) -> tuple:
        """Per-boundary facts that do not depend on the path taken, for the chunk of `batch`."""
        chunk = batch // self.chunk
        if chunk not in self._cache:
            if len(self._cache) >= 3:
                self._cache.pop(next(iter(self._cache)))
            first = chunk * self.chunk
            count = min(self.chunk, self.num_batches - first)
            ends = np.arange(first + 1, first + count + 1, dtype=np.int64)
            floor, rem = (
                self.floor[first + 1 : first + count + 1],
                self.rem[first + 1 : first + count + 1],
            )
            a = np.maximum(self.numer_arr, 1)
            # tau: steps after the boundary until y_k reaches a ceil's count (how long a ceil
            # counts against (P)); sigma: the step of the batch from which a floor leaves k
            # behind (counts against (R) up to the boundary).
            tau = -(-(WEIGHT_SCALE - rem) // a)
            sigma = self.width + 1 + (-rem // a)
            room = self.drop[first + 1 : first + count + 1] - (ends * self.width)[:, None]
            # due: boundaries until a floor now would make the ceil mandatory (the carried
            # fraction of y_k reaches a whole sequence): earliest-deadline-first at batch level.
            rho = (self.numer_arr * self.width) % WEIGHT_SCALE  # fractional quota, scaled
            due = np.where(rho > 0, -(-(WEIGHT_SCALE - rem) // np.maximum(rho, 1)), _NEVER)
            # ahead_for / behind_for: further boundaries at which a ceil (floor) now keeps the
            # component ahead (behind) whatever comes next, the batch bound allowing one step.
            ahead_for = np.where(rho > 0, due - 1, _NEVER)
            behind_for = np.where(rho > 0, -(-rem // (WEIGHT_SCALE - rho)) - 1, _NEVER)
            # ahead_next: further boundaries after which a ceil now still leaves the component
            # ahead one step into the batch (y there below its least possible count).
            gap = WEIGHT_SCALE - rem - self.numer_arr
            ahead_next = np.where(
                gap > 0, np.where(rho > 0, -(-gap // np.maximum(rho, 1)) - 1, _NEVER), 0
            )
            self._cache[chunk] = (
                first,
                floor,
                rem,
                tau,
                sigma,
                room,
                np.ascontiguousarray(self.short[first : first + count]),
                due,
                ahead_for,
                behind_for,
                np.ascontiguousarray(self.lag_up[first + 1 : first + count + 1]),
                np.ascontiguousarray(self.lag_down[first + 1 : first + count + 1]),
                ahead_next,
                np.ascontiguousarray(self.lag_next[first + 1 : first + count + 1]),
            )
        return self._cache[chunk]

    def _row(self, batch: int) -> tuple:
        first, *arrays = self._rows(batch)
        return tuple(array[batch - first].tolist() for array in arrays)

    def choices(
        self, batch: int, state: list[int], skip_first: bool = False
    ) -> Iterator[list[int]]:
        """Valid next boundary states after `batch`, most urgent ceil-set first (`skip_first`:
        that one was already taken and led to a dead end)."""
        row = self._row(batch)
        lo, rem, tau, sigma, room, short, due = row[:7]
        mandatory, optional, fixed_ahead, fixed_behind = [], [], [], []
        for k, quota in enumerate(self.quota):
            f = lo[k]
            b = state[k] + quota
            if b + 1 == f and self.fractional[k]:
                mandatory.append(k)
                if rem[k]:
                    fixed_behind.append(k)
            elif b == f:
                if not rem[k]:
                    continue
                if self.fractional[k]:
                    optional.append(k)
                else:
                    fixed_behind.append(k)
            elif b == f + 1 and rem[k]:
                fixed_ahead.append(k)
            else:
                return  # the state cannot reach a valid boundary (never on a valid path)
        need = self.extras - len(mandatory)
        if need < 0 or need > len(optional):
            return
        slots = _Slots(row, self.width)
        # The common case first: the ceils whose batch-level deadline comes first (then the ones
        # that catch up soonest inside the next batch); then the alternatives.
        by_deadline = sorted(optional, key=lambda k: (due[k], tau[k]))
        first = [] if skip_first else [tuple(by_deadline[:need])]
        alternatives = _ceil_sets(by_deadline, need, tau, sigma, slots, fixed_ahead, fixed_behind)
        for chosen in itertools.chain(first, alternatives):
            taken = set(chosen)
            rest = [k for k in by_deadline if k not in taken]
            if not slots.fits(fixed_ahead + list(chosen), fixed_behind + rest):
                continue
            counts = list(self.quota)
            for k in itertools.chain(mandatory, chosen):
                counts[k] += 1
            yield counts

    def run(self) -> np.ndarray:
        counts = np.zeros((self.num_batches, len(self.numer)), dtype=np.int64)
        state = [0] * len(self.numer)
        # (batch, state before it, its remaining choices or None when only the first was tried)
        trail: deque = deque(maxlen=MAX_BACKTRACK)
        dead: set = set()
        batch, pending = 0, None
        while batch < self.num_batches:
            if pending is None and dead and (batch, tuple(state)) in dead:
                pending = iter(())  # reached again by another path: known to lead nowhere
            if pending is None:
                pending = self.choices(batch, state)
            row = next(pending, None)
            if row is None:
                dead.add((batch, tuple(state)))
                if not trail:
                    raise ScheduleError(
                        f"no mixture schedule meets both quota bounds at batch {batch} "
                        f"(weights {self.key}, W={self.width}); please report this"
                    )
                batch, state, pending = trail.pop()
                if pending is None:
                    pending = self.choices(batch, state, skip_first=True)
                continue
            after = [s + c for s, c in zip(state, row, strict=True)]
            if dead and (batch + 1, tuple(after)) in dead:
                continue
            trail.append((batch, state, pending))
            counts[batch] = row
            batch, state, pending = batch + 1, after, None
        return counts.astype(np.int32)


class _Slots:
    """Conditions (P) and (R) as capacities, for the components ahead / behind at a boundary:
    the j-th latest catch-up step must come before Phi first drops below j (however far ahead),
    the j-th earliest pass step must leave Psi >= j up to the boundary; and at later boundaries,
    the j-th longest forced lead (lag) must end before Phi (Psi) there first drops below j."""

    def __init__(self, row: tuple, width: int) -> None:
        _, _, self.tau, self.sigma, self.room, self.short, _ = row[:7]
        self.ahead_for, self.behind_for, self.lag_up, self.lag_down = row[7:11]
        self.ahead_next, self.lag_next = row[11:]
        self.width = width

    def fits(self, ahead: list[int], behind: list[int]) -> bool:
        for j, tau in enumerate(sorted((self.tau[k] for k in ahead), reverse=True), start=1):
            if tau < 2:
                break
            if tau > self.room[j - 1]:
                return False
        width = self.width
        for j, sigma in enumerate(sorted(self.sigma[k] for k in behind), start=1):
            if sigma > width - 1:
                break
            if max(sigma, 1) <= self.short[j - 1]:
                return False
        for held, lag, group in (
            (self.ahead_for, self.lag_up, ahead),
            (self.behind_for, self.lag_down, behind),
            (self.ahead_next, self.lag_next, ahead),
        ):
            for j, span in enumerate(sorted((held[k] for k in group), reverse=True), start=1):
                if span < 1:
                    break
                if span >= lag[j - 1]:
                    return False
        return True

    def match(
        self,
        optional: list[int],
        need: int,
        tau: list[int],
        sigma: list[int],
        fixed_ahead: list[int],
        fixed_behind: list[int],
    ) -> tuple[int, ...] | None:
        """An exact ceil-set: a perfect matching of components to ahead and behind slots."""
        n_ahead = need + len(fixed_ahead)
        n_behind = len(optional) - need + len(fixed_behind)
        reach = [self.room[j] if j < len(self.room) else 1 for j in range(n_ahead)]
        floor = [self.short[j] + 1 if j < len(self.short) else self.width for j in range(n_behind)]

        def ahead_ok(t: int, slot: int) -> bool:
            return t < 2 or t <= reach[slot]

        def behind_ok(s: int, slot: int) -> bool:
            return max(s, 1) >= floor[slot]

        # Slots 0..n_ahead-1 are ahead, then behind; every component needs one slot.
        items = [("a", tau[k]) for k in fixed_ahead] + [("b", sigma[k]) for k in fixed_behind]
        items += [("o", k) for k in optional]

        def edges(item: tuple) -> list[int]:
            kind, value = item
            out = []
            if kind in "ao":
                t = value if kind == "a" else tau[value]
                out += [j for j in range(n_ahead) if ahead_ok(t, j)]
            if kind in "bo":
                s = value if kind == "b" else sigma[value]
                out += [n_ahead + j for j in range(n_behind) if behind_ok(s, j)]
            return out

        adjacency = [edges(item) for item in items]
        owner = [-1] * (n_ahead + n_behind)

        def augment(i: int, seen: list[bool]) -> bool:
            for slot in adjacency[i]:
                if not seen[slot]:
                    seen[slot] = True
                    if owner[slot] < 0 or augment(owner[slot], seen):
                        owner[slot] = i
                        return True
            return False

        for i in range(len(items)):
            if not augment(i, [False] * len(owner)):
                return None
        return tuple(
            items[owner[slot]][1] for slot in range(n_ahead) if items[owner[slot]][0] == "o"
        )


def _ceil_sets(
    by_deadline: list[int],
    need: int,
    tau: list[int],
    sigma: list[int],
    slots: _Slots,
    fixed_ahead: list[int],
    fixed_behind: list[int],
) -> Iterator[tuple[int, ...]]:
    """Alternative ceil-sets after the earliest-deadline one: nearby combinations in deadline
    order; by how much more a floor would cost than a ceil; an exact one from a matching; more
    combinations (capped)."""
    # A ceil counts for tau steps, a floor for (W - sigma): prefer ceils where they cost less.
    by_balance = sorted(by_deadline, key=lambda k: (tau[k] + sigma[k], tau[k], k))
    seen = {frozenset(by_deadline[:need])}

    def matched() -> Iterator[tuple[int, ...]]:
        found = slots.match(by_deadline, need, tau, sigma, fixed_ahead, fixed_behind)
        if found is not None:
            yield found

    # Ceil-sets in batch-deadline order first: a ceil with a late deadline keeps its component
    # ahead for many batches (a long-range cost the per-batch checks only partly see).
    combos = itertools.combinations(by_deadline, need)
    candidates = itertools.chain(
        itertools.islice(combos, MAX_CHOICES // 2),
        (tuple(by_balance[:need]),),
        matched(),
        combos,
    )
    for chosen in itertools.islice(candidates, MAX_CHOICES):
        key = frozenset(chosen)
        if key not in seen:
            seen.add(key)
            yield chosen


def allocate_batches(
    weights: Sequence[float] | np.ndarray, num_batches: int, global_batch: int
) -> np.ndarray:
    """Per-batch sequence counts, shape (num_batches, K), rows summing to `global_batch`.

    Each count is floor or ceil of w_k * W, and the boundaries admit an order of every batch that
    keeps every prefix within 1 sequence of quota (`interleave` finds it)."""
    if global_batch < 1 or num_batches < 0 or global_batch >= 1 << 22 or num_batches >= 1 << 31:
        raise ValueError(
            f"global_batch must be in [1, 2**22) and num_batches in [0, 2**31), "
            f"got {global_batch}, {num_batches}"
        )
    numer = quantize_weights(weights)
    if num_batches == 0:
        return np.zeros((0, numer.size), dtype=np.int32)
    return _BoundaryPlanner(numer, global_batch, num_batches).run()
