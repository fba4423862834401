"""A tenant's realised idle ratio over a sliding window, and whether a new hold fits its budget."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

IDLE_BUDGET_WINDOW_S = 24 * 3600.0
# A tenant with little recent work is judged as if it had this much, so one that has just
# started can still speculate a little (0.05 x 8 GPU-hours = 24 idle GPU-minutes) instead of
# being refused on a ratio over almost nothing.
MIN_BUSY_GPU_S = 8 * 3600.0
IDLE_BUDGET_EXCEEDED = "idle_budget_exceeded"


@dataclass(frozen=True, slots=True)
class HoldSpan:
    """A placed hold: when it was placed, when it ended (None: still held), its GPUs, and the
    warm-up it did (seconds), which a job started without it would have waited anyway."""

    placed_at: float
    ended_at: float | None
    gpu_count: int
    claimed: bool = False
    warmup_s: float = 0.0


@dataclass(frozen=True, slots=True)
class UseSpan:
    """An allocation's GPUs in use: from allocation to release (None: still running)."""

    allocated_at: float
    released_at: float | None
    gpu_count: int


@dataclass(frozen=True, slots=True)
class IdleUsage:
    """Window totals in GPU-seconds and the realised ratio (None while nothing was busy)."""

    window_s: float
    idle_gpu_s: float
    busy_gpu_s: float

    @property
    def ratio(self) -> float | None:
        return None if self.busy_gpu_s <= 0 else self.idle_gpu_s / self.busy_gpu_s

    def allowance_gpu_s(self, budget: float) -> float:
        """Idle GPU-seconds the budget allows in this window."""
        return budget * max(self.busy_gpu_s, MIN_BUSY_GPU_S)

    def over(self, budget: float) -> bool:
        return self.idle_gpu_s >= self.allowance_gpu_s(budget)


def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


def realised_idle(
    holds: Iterable[HoldSpan],
    uses: Iterable[UseSpan],
    *,
    now: float,
    window_s: float = IDLE_BUDGET_WINDOW_S,
) -> IdleUsage:
    """Idle beyond reactive and busy GPU-seconds within [now - window_s, now].

    A hold's idle is the time its GPUs sat set aside without a job. A claimed hold's own
    warm-up is not extra: a job started without the hold would have waited for it anyway, so
    it is taken off the end of that hold's idle span (the part just before the claim). An
    unclaimed hold's whole span is extra, since no job came to use it.
    """
    if not window_s > 0:
        raise ValueError("window_s must be positive")
    lo = now - window_s
    idle = 0.0
    for h in holds:
        end = now if h.ended_at is None else min(h.ended_at, now)
        if h.claimed:
            end = max(h.placed_at, end - max(0.0, h.warmup_s))
        idle += _overlap(h.placed_at, end, lo, now) * h.gpu_count
    busy = 0.0
    for u in uses:
        end = now if u.released_at is None else min(u.released_at, now)
        busy += _overlap(u.allocated_at, end, lo, now) * u.gpu_count
    return IdleUsage(window_s=window_s, idle_gpu_s=idle, busy_gpu_s=busy)
