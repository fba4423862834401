"""What a hold is worth: expected time-to-GPU saved against idle GPU-seconds, from gap samples."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from predictors._stats import SortedWindow

WINDOWS_S: tuple[float, ...] = (
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1200.0,
    1800.0,
    2700.0,
    3600.0,
    5400.0,
    7200.0,
    10800.0,
    14400.0,
    21600.0,
)
"""Candidate window ends (seconds after the latest activity) a priced forecast chooses from."""

# Per window end, over the gaps that lasted `elapsed`: (P(next arrival by the end), expected
# idle seconds per GPU, expected seconds saved per arrival).
Moments = list[tuple[float, float, float]]


@dataclass(frozen=True, slots=True)
class HoldChoice:
    """The best window for one hold: it ends `end_s` after the anchor (the latest activity)."""

    end_s: float
    hit: float  # P(the next arrival falls in the window | the gap has lasted `elapsed`)
    saved_s: float  # expected time-to-GPU saved, seconds
    idle_s: float  # expected idle seconds per GPU held
    value: float  # saved_s - price x gpus x idle_s


def moments(
    window: SortedWindow, elapsed: float, ends: tuple[float, ...], lead_s: float
) -> tuple[int, Moments]:
    """How many samples lasted `elapsed`, and for each end their means: the share that ended by
    then, the idle time min(gap, end) - elapsed, and min(gap - elapsed, lead_s) over those that
    ended by then (what a hold set aside now, warm after `lead_s`, saves). One bisect per end
    on the sorted samples and their prefix sums: this runs at every event of a replay."""
    ordered, prefix = window.sorted_with_prefix()
    lo = bisect_left(ordered, elapsed)
    n = len(ordered) - lo
    if n == 0:
        return 0, []
    base = prefix[lo]
    split = bisect_right(ordered, elapsed + lead_s)
    out: Moments = []
    for end in ends:
        hi = bisect_right(ordered, end)
        hits = hi - lo
        idle = prefix[hi] - base - hits * elapsed + (n - hits) * (end - elapsed)
        early = min(split, hi)
        saved = prefix[early] - base - (early - lo) * elapsed + (hi - early) * lead_s
        out.append((hits / n, idle / n, saved / n))
    return n, out


@dataclass(frozen=True, slots=True)
class GapOutlook:
    """The blended moments of the next arrival for each candidate window end: computed once
    per forecast, then valued for as many holds (sizes, savings) as needed."""

    ends: tuple[float, ...]
    moments: Moments


def outlook(
    own: SortedWindow,
    prior: SortedWindow | None,
    prior_weight: float,
    elapsed: float,
    *,
    lead_s: float,
    windows: tuple[float, ...] = WINDOWS_S,
    max_end_s: float | None = None,
    prior_memo: dict[object, object] | None = None,
) -> GapOutlook | None:
    """The next arrival drawn from the user's gaps that lasted `elapsed` (`own`), blended with
    the population's (`prior`, worth `prior_weight` of the user's samples); None without
    samples or candidate ends. `prior_memo`, emptied whenever `prior` changes, spares
    recomputing the prior's moments: most calls come at an event (elapsed 0), where every user
    shares them."""
    ends = tuple(e for e in windows if e > elapsed and (max_end_s is None or e <= max_end_s))
    if not ends:
        return None
    n, mine = moments(own, elapsed, ends, lead_s)
    pn, theirs = 0, []
    if prior is not None and prior_weight > 0:
        key = (id(prior), elapsed, ends, lead_s)
        cached = None if prior_memo is None else prior_memo.get(key)
        if cached is None:
            cached = moments(prior, elapsed, ends, lead_s)
            if prior_memo is not None:
                prior_memo[key] = cached
        pn, theirs = cached  # type: ignore[misc]
    if not pn:
        return GapOutlook(ends, mine) if n else None
    if not n:
        return GapOutlook(ends, theirs)
    # The user's own record weighs as many samples as it has; the population as
    # `prior_weight` of them.
    a = n / (n + prior_weight)
    b = 1.0 - a
    blended = [
        (a * h + b * ph, a * i + b * pi, a * s + b * ps)
        for (h, i, s), (ph, pi, ps) in zip(mine, theirs, strict=True)
    ]
    return GapOutlook(ends, blended)


def choose(
    view: GapOutlook, *, gpus: int, price: float, lead_s: float, warm: bool, fit: float = 1.0
) -> HoldChoice | None:
    """The window end that maximises saved seconds minus `price` x GPU-seconds idle, or None
    when no end pays. A hold that is warm at once (`warm`: the GPUs of a job that just ended)
    saves `lead_s` on every arrival in the window; one set aside now saves only the part of
    the warm-up that had passed. `fit` is the chance the next job fits the hold."""
    cost = price * gpus
    best_value, best_i = 0.0, -1
    for i, (hit, idle, saved) in enumerate(view.moments):
        value = fit * (lead_s * hit if warm else saved) - cost * idle
        if value > best_value:
            best_value, best_i = value, i
    if best_i < 0:
        return None
    hit, idle, saved = view.moments[best_i]
    gain = fit * (lead_s * hit if warm else saved)
    return HoldChoice(view.ends[best_i], hit, gain, idle, best_value)


def best_hold(
    own: SortedWindow,
    prior: SortedWindow | None,
    prior_weight: float,
    elapsed: float,
    *,
    gpus: int,
    price: float,
    lead_s: float,
    warm: bool,
    fit: float = 1.0,
    windows: tuple[float, ...] = WINDOWS_S,
    max_end_s: float | None = None,
    prior_memo: dict[object, object] | None = None,
) -> HoldChoice | None:
    """`choose` over `outlook`: the best window for one hold (see both)."""
    view = outlook(
        own,
        prior,
        prior_weight,
        elapsed,
        lead_s=lead_s,
        windows=windows,
        max_end_s=max_end_s,
        prior_memo=prior_memo,
    )
    if view is None:
        return None
    return choose(view, gpus=gpus, price=price, lead_s=lead_s, warm=warm, fit=fit)
