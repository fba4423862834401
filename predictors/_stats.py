"""Small, allocation-free statistics used on the hot path of every statistical predictor."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from itertools import accumulate

SIZE_PRIOR = 0.9
"""Prior share of jobs no larger than the same user's previous job (0.92 on Helios)."""


class SortedWindow:
    """The last `maxlen` samples, kept both in arrival order and sorted.

    Sorted so that quantiles are an index and tail counts a bisect: predictors ask for them on
    every call, while samples arrive only once per job.
    """

    __slots__ = ("_order", "_prefix", "_sorted", "maxlen")

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self._order: deque[float] = deque()
        self._sorted: list[float] = []
        self._prefix: list[float] | None = None

    def add(self, value: float) -> None:
        if len(self._order) == self.maxlen:
            oldest = self._order.popleft()
            del self._sorted[bisect_left(self._sorted, oldest)]
        self._order.append(value)
        insort(self._sorted, value)
        self._prefix = None

    def __len__(self) -> int:
        return len(self._sorted)

    def values(self) -> list[float]:
        """Samples in arrival order (a copy)."""
        return list(self._order)

    def count_le(self, value: float) -> int:
        return bisect_right(self._sorted, value)

    def count_gt(self, value: float) -> int:
        return len(self._sorted) - bisect_right(self._sorted, value)

    def count_ge(self, value: float) -> int:
        return len(self._sorted) - bisect_left(self._sorted, value)

    def count_between(self, low: float, high: float) -> int:
        """Samples in the closed interval [low, high]."""
        if high < low:
            return 0
        return bisect_right(self._sorted, high) - bisect_left(self._sorted, low)

    def sum_between(self, low: float, high: float) -> float:
        """Sum of the samples in the closed interval [low, high]."""
        if high < low:
            return 0.0
        ordered, prefix = self.sorted_with_prefix()
        return prefix[bisect_right(ordered, high)] - prefix[bisect_left(ordered, low)]

    def sorted_with_prefix(self) -> tuple[list[float], list[float]]:
        """The sorted samples and their prefix sums (prefix[i] = sum of the i smallest), for
        callers that scan many thresholds at once. Read-only views: do not modify them."""
        prefix = self._prefix
        if prefix is None:
            # Rebuilt once after an add: samples arrive once per job, reads come per call.
            prefix = self._prefix = [0.0, *accumulate(self._sorted)]
        return self._sorted, prefix

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile (q in [0, 1]); None when empty."""
        n = len(self._sorted)
        if n == 0:
            return None
        index = min(n - 1, max(0, math.ceil(q * n) - 1))
        return self._sorted[index]


def shrunk_rate(hits: float, trials: float, prior: float, strength: float) -> float:
    """Beta-binomial posterior mean: `prior` counts as `strength` pseudo-trials.

    Keeps a user with three jobs from getting confidence 0 or 1 out of three samples.
    """
    total = trials + strength
    if total <= 0:
        return prior
    return min(1.0, max(0.0, (hits + prior * strength) / total))


def conditional_hit(
    window: SortedWindow, elapsed: float, low: float, high: float, prior: float, strength: float
) -> float:
    """P(low <= gap <= high | gap >= elapsed), estimated from the window with a prior.

    This is what makes the confidences calibrated-ish: the frequency with which this user's past
    gaps, among those that had already lasted `elapsed`, ended inside the forecast window.
    """
    survivors = window.count_ge(elapsed)
    hits = window.count_between(max(low, elapsed), high)
    return shrunk_rate(hits, survivors, prior, strength)


def poisson_at_least(k: int, mean: float) -> float:
    """P(N >= k) for N ~ Poisson(mean)."""
    if k <= 0:
        return 1.0
    if mean <= 0.0:
        return 0.0
    term = math.exp(-mean)
    below = term
    for i in range(1, k):
        term *= mean / i
        below += term
    return min(1.0, max(0.0, 1.0 - below))
