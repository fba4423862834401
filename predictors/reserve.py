"""Adaptive warm reserve: how many GPUs to keep warm for an active user, and for how long."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import inf

# Candidate active windows: the reserve stays up this long after a user's latest submit.
WINDOWS_S: tuple[float, ...] = (300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
MAX_SAMPLES = 128  # a user's recent submits the choice is made from
MIN_SAMPLES = 8  # below this, no reserve: too little of the user's own record to size it
REFRESH_JOBS = 8  # re-choose after this many new submits of the user (or a new price)
MAX_RESERVE_GPUS = 64


@dataclass(frozen=True, slots=True)
class Sample:
    """One past submit: the gap since the user's previous submit; `lapse_s`, how long before
    the submit's warm-up began (a warm-up before it) the user had last submitted (a reserve
    serves it warm only if it was up by then: one set aside by the first job of a clump is
    still warming when the rest arrive); the GPUs the user submitted
    within one warm-up up to and including it (what a reserve must have held for this job to
    find its GPUs warm: the reserve refills after each claim, and a refill takes a warm-up);
    what a second saved for it is worth (by the job's size); and what the forecast beside
    the reserve held for the user going into it: `held`, the GPUs it asked for at the user's
    previous event (a reserve up to that costs nothing more), and `warm`, those it asked for
    at least a warm-up before this submit (warm by then: a reserve up to that serves nothing
    more)."""

    gap_s: float
    demand: int
    weight: float
    held: int = 0
    warm: int = 0
    lapse_s: float = 0.0
    gpus: int = 1


@dataclass(frozen=True, slots=True)
class ReserveChoice:
    """Keep `gpus` warm until `window_s` after the user's latest submit."""

    gpus: int
    window_s: float
    value: float  # seconds saved minus price x idle GPU-seconds, over the samples


def choose_reserve(
    samples: Sequence[Sample],
    *,
    lead_s: float,
    price: float,
    windows: Sequence[float] = WINDOWS_S,
    max_gpus: int = MAX_RESERVE_GPUS,
) -> ReserveChoice | None:
    """The reserve (GPUs, window) that would have added most over `samples`, or None.

    Replayed on the samples, a reserve of R GPUs, up for W seconds after each submit as a
    floor under what the forecast holds, serves a submit warm that the forecast would not
    have when it was up a warm-up before the submit (lapse and gap at most W) and the user's
    demand within a warm-up is more than the forecast had warm and at most R. Each such
    submit saves a warm-up (`lead_s`) times its weight. The reserve idles R - held GPUs beyond
    the forecast's for min(gap, W) before each submit (from the one before, up to the end of
    the window), at `price` seconds saved per idle GPU-second: the unit of the priced burst
    forecast, so one budget controller steers both. None when no reserve pays.
    """
    if not samples or price <= 0:
        return None
    by_held = sorted(samples, key=lambda s: s.held)
    best: ReserveChoice | None = None
    for window in windows:
        served = sorted(
            (
                s
                for s in samples
                if max(s.gap_s, s.lapse_s) <= window and s.warm < s.demand <= max_gpus
            ),
            key=lambda s: s.demand,
        )
        saved = refund = 0.0
        active = weighted_held = 0.0  # over samples holding less than R: sum a, sum held x a
        i = j = 0
        while i < len(served):
            gpus = served[i].demand
            while i < len(served) and served[i].demand == gpus:
                saved += lead_s * served[i].weight
                refund += lead_s * served[i].gpus
                i += 1
            while j < len(by_held) and by_held[j].held < gpus:
                span = min(by_held[j].gap_s, window)
                active += span
                weighted_held += by_held[j].held * span
                j += 1
            value = saved - price * (gpus * active - weighted_held - refund)
            if value > 0 and (best is None or value > best.value):
                best = ReserveChoice(gpus, window, value)
    return best


@dataclass(slots=True)
class _User:
    submits: deque[tuple[float, int]] = field(default_factory=deque)  # within one warm-up
    before: float | None = None  # the latest submit more than a warm-up ago
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    last_submit: float | None = None
    # (event time, warm from, GPUs) the forecast asked to hold at the user's recent events.
    asked: deque[tuple[float, float, int]] = field(default_factory=deque)
    since_choice: int = 0
    choice: ReserveChoice | None = None
    price: float | None = None  # the price `choice` was made at


class WarmReserve:
    """Per user, a reserve of warm GPUs while the user is active, sized and timed by
    `choose_reserve` from the user's own recent submits at the current `price`.

    `observe_arrival` records a submit; `plan(user, now)` says how many GPUs to keep warm for
    the user now and until when, or None when the user is not active or no reserve pays.
    `lead_s` is the warm-up (the cold start). Set `price` (and `user_prices`, per-user
    overrides) as a budget controller moves it.
    """

    def __init__(
        self,
        *,
        lead_s: float = 120.0,
        price: float = 0.009,
        weigh: Callable[[int], float] = lambda gpus: 1.0,
        min_samples: int = MIN_SAMPLES,
        refresh_jobs: int = REFRESH_JOBS,
        windows: Sequence[float] = WINDOWS_S,
        max_gpus: int = MAX_RESERVE_GPUS,
    ) -> None:
        if not lead_s > 0 or not price > 0:
            raise ValueError("lead_s and price must be positive")
        if min_samples < 1 or refresh_jobs < 1 or max_gpus < 1:
            raise ValueError("min_samples, refresh_jobs and max_gpus must be at least 1")
        self.lead_s = lead_s
        self.price = price
        self.user_prices: dict[str, float] = {}
        self.weigh = weigh
        self.min_samples = min_samples
        self.refresh_jobs = refresh_jobs
        self.windows = tuple(sorted(windows))
        self.max_gpus = max_gpus
        self._users: dict[str, _User] = {}

    def observe_arrival(self, user: str, at: float, gpus: int) -> None:
        state = self._users.get(user)
        if state is None:
            state = self._users[user] = _User()
        recent = state.submits
        while recent and recent[0][0] <= at - self.lead_s:
            state.before = recent.popleft()[0]
        recent.append((at, gpus))
        if state.last_submit is not None:
            demand = sum(g for _, g in recent)
            gap = at - state.last_submit
            asked = state.asked
            held = asked[-1][2] if asked else 0
            # What the latest event whose holds are warm by now asked for.
            warm = next((g for _, ready, g in reversed(asked) if ready <= at), 0)
            lapse = inf if state.before is None else at - self.lead_s - state.before
            sample = Sample(gap, demand, self.weigh(gpus), held, warm, lapse, gpus)
            state.samples.append(sample)
        state.last_submit = at
        state.since_choice += 1

    def note_forecast(self, user: str, at: float, gpus: int, *, warm: bool = False) -> None:
        """What the forecast beside the reserve asked to hold for `user` at its event `at`:
        warm a warm-up later, or at once (`warm`: GPUs of an ending job it kept)."""
        state = self._users.get(user)
        if state is None:
            state = self._users[user] = _User()
        asked = state.asked
        asked.append((at, at if warm else at + self.lead_s, gpus))
        # Events more than a warm-up old are all warm: the latest of them is enough.
        while len(asked) > 1 and asked[1][0] <= at - self.lead_s:
            asked.popleft()

    def plan(self, user: str, now: float) -> tuple[int, float] | None:
        """(GPUs to keep warm, until when) for `user` at `now`; None when none."""
        state = self._users.get(user)
        if state is None or state.last_submit is None or len(state.samples) < self.min_samples:
            return None
        price = self.user_prices.get(user, self.price)
        if state.price != price or state.since_choice >= self.refresh_jobs:
            state.choice = choose_reserve(
                state.samples,
                lead_s=self.lead_s,
                price=price,
                windows=self.windows,
                max_gpus=self.max_gpus,
            )
            state.price, state.since_choice = price, 0
        choice = state.choice
        if choice is None:
            return None
        until = state.last_submit + choice.window_s
        return (choice.gpus, until) if until > now else None
