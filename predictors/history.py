"""Per-user history features, updated in O(1)-ish per event so predictors read them for free."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from predictors._stats import SIZE_PRIOR, SortedWindow, shrunk_rate
from predictors.types import Event, EventKind

DAY_S = 86400
LN2 = math.log(2.0)


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    """Sizes and calendars of the history; the defaults suit both the agent and a replay."""

    max_events: int = 32  # recent events kept for the context (the LLM sees these)
    max_gaps: int = 256  # gap samples kept per user (a sliding window, oldest dropped)
    max_recent_sizes: int = 16
    max_k: int = 4  # k-step submit gaps kept for k = 2..max_k (several jobs in one burst)
    ewma_half_lives_s: tuple[float, ...] = (600.0, 3600.0, 21600.0, 86400.0)
    season_bin_s: int = 3600  # seasonality resolution; must divide a day
    utc_offset_s: float = 0.0  # the user's local time = epoch + offset (day and hour bins)
    aggregate: bool = False  # also keep an ALL_USERS history (warm-pool forecasts)
    max_open_jobs: int = 4096  # bound on jobs tracked between submit and finish
    cue_max_lag_s: float = 3600.0  # a job later than this after a cue is not its consequence
    pool_gaps: int = 2048  # idle gaps of all users kept together (GapPool); 0: no pool

    def __post_init__(self) -> None:
        if self.season_bin_s <= 0 or DAY_S % self.season_bin_s:
            raise ValueError("season_bin_s must divide 86400")
        if self.max_k < 1 or self.max_gaps < 1 or self.max_events < 1:
            raise ValueError("history sizes must be at least 1")
        if self.pool_gaps < 0:
            raise ValueError("pool_gaps must not be negative")


def local_day(at: float, utc_offset_s: float) -> int:
    return math.floor((at + utc_offset_s) / DAY_S)


def is_weekend(day: int) -> bool:
    # Day 0 of the epoch (1970-01-01) was a Thursday; Monday is weekday 0.
    return (day + 3) % 7 >= 5


def weekday(day: int) -> int:
    return (day + 3) % 7


def count_days(first: int, stop: int, weekend: bool) -> int:
    """Days of one type (weekend or not) in [first, stop)."""
    if stop <= first:
        return 0
    full = (stop - first) // 7
    count = full * (2 if weekend else 5)
    for day in range(first + full * 7, stop):
        if is_weekend(day) == weekend:
            count += 1
    return count


class EwmaState:
    """Exponentially weighted arrival rates (jobs/s and GPUs/s) for one half-life."""

    __slots__ = ("at", "gpus_rate", "half_life_s", "jobs_rate")

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.jobs_rate = 0.0
        self.gpus_rate = 0.0
        self.at: float | None = None

    def add(self, at: float, gpus: int) -> None:
        decay = self.decay_to(at)
        # Each job adds a kernel of area 1 (ln2/half-life), so the sum estimates jobs per second.
        unit = LN2 / self.half_life_s
        self.jobs_rate = self.jobs_rate * decay + unit
        self.gpus_rate = self.gpus_rate * decay + unit * gpus
        self.at = at if self.at is None else max(self.at, at)

    def decay_to(self, at: float) -> float:
        if self.at is None or at <= self.at:
            return 1.0
        return 2.0 ** (-(at - self.at) / self.half_life_s)

    def rates_at(self, at: float) -> tuple[float, float]:
        decay = self.decay_to(at)
        return self.jobs_rate * decay, self.gpus_rate * decay


AFTER_SUBMIT = 0
AFTER_FINISH = 1
"""Kinds of a user's latest activity: an idle gap that follows a submit (or start) is in a
burst of submissions; one that follows a finish is what keep-alive serves."""


class GapPool:
    """Idle gaps of every user together, by the kind of activity they followed.

    The prior for a user with few gaps of their own: new users behave like the population
    until their own record outweighs it. Samples join the windows `batch` at a time, so that
    readers' prefix sums are rebuilt once per batch rather than once per job (the pool lags by
    fewer than `batch` samples, which a population prior does not notice).
    """

    __slots__ = ("_pending", "batch", "by_kind", "memo")

    def __init__(self, maxlen: int, batch: int = 32) -> None:
        self.by_kind = (SortedWindow(maxlen), SortedWindow(maxlen))
        self.batch = max(1, batch)
        self._pending: list[tuple[int, float]] = []
        # Readers may keep what they derived from the windows here; emptied when they change.
        self.memo: dict[object, object] = {}

    def add(self, kind: int, gap: float) -> None:
        self._pending.append((kind, gap))
        if len(self._pending) >= self.batch:
            for k, value in self._pending:
                self.by_kind[k].add(value)
            self._pending.clear()
            self.memo.clear()


class UserHistory:
    """Everything the statistical predictors know about one user; mutated only by the builder.

    Gap kinds: `gaps` are submit-to-submit; `idle_gaps` run from the user's latest activity
    (a submit, start or finish) to the next submit, which is what keep-alive-style holds face;
    `idle_gaps_by_kind[AFTER_SUBMIT | AFTER_FINISH]` split them by that activity's kind.
    """

    __slots__ = (
        "_open",
        "config",
        "cue_hits",
        "cue_lags",
        "cue_pending",
        "cue_seen",
        "dow_jobs",
        "durations",
        "ewma",
        "first_at",
        "first_day",
        "gaps",
        "hod_jobs",
        "idle_gaps",
        "idle_gaps_by_kind",
        "kgaps",
        "last_activity_at",
        "last_activity_kind",
        "last_finish_at",
        "last_gpu_model",
        "last_gpus",
        "last_submit_at",
        "max_gpus",
        "n_events",
        "n_jobs",
        "open_gpus",
        "pool",
        "recent_sizes",
        "season_active",
        "season_marked",
        "size_counts",
        "size_pairs",
        "size_pairs_fit",
        "submit_times",
        "user",
    )

    def __init__(self, user: str, config: HistoryConfig, pool: GapPool | None = None) -> None:
        self.user = user
        self.config = config
        self.pool = pool
        self.n_events = 0
        self.n_jobs = 0
        self.first_at: float | None = None
        self.first_day: int | None = None
        self.last_submit_at: float | None = None
        self.last_finish_at: float | None = None
        self.last_activity_at: float | None = None
        self.last_activity_kind = AFTER_SUBMIT
        self.last_gpus: int | None = None
        self.last_gpu_model: str | None = None
        self.max_gpus = 0
        self.recent_sizes: deque[int] = deque(maxlen=config.max_recent_sizes)
        self.size_counts: dict[int, int] = {}
        # Consecutive jobs, and those no larger than the job before: how often "the same
        # size again" would have been enough.
        self.size_pairs = 0
        self.size_pairs_fit = 0
        self.gaps = SortedWindow(config.max_gaps)
        self.idle_gaps = SortedWindow(config.max_gaps)
        self.idle_gaps_by_kind = (SortedWindow(config.max_gaps), SortedWindow(config.max_gaps))
        self.kgaps = [SortedWindow(config.max_gaps) for _ in range(2, config.max_k + 1)]
        self.submit_times: deque[float] = deque(maxlen=config.max_k)
        self.durations = SortedWindow(config.max_gaps)
        self._open: dict[str, tuple[float, int]] = {}
        self.open_gpus = 0
        self.ewma = {hl: EwmaState(hl) for hl in config.ewma_half_lives_s}
        bins = DAY_S // config.season_bin_s
        # [weekday, weekend][bin]: on how many days the user submitted in that bin.
        self.season_active = [[0] * bins, [0] * bins]
        self.season_marked = [[-1] * bins, [-1] * bins]
        self.hod_jobs = [0] * 24
        self.dow_jobs = [0] * 7
        self.cue_seen: dict[str, int] = {}
        self.cue_hits: dict[str, int] = {}
        self.cue_lags: dict[str, SortedWindow] = {}
        self.cue_pending: dict[str, float] = {}

    # -- reading -------------------------------------------------------------------------

    @property
    def open_jobs(self) -> int:
        return len(self._open)

    def is_open(self, job_id: str) -> bool:
        """Whether the job was submitted (or started) and has not finished yet."""
        return job_id in self._open

    def typical_size(self, how: str = "last") -> int:
        """GPUs per job to forecast: the last job's, the recent mode, or the recent maximum."""
        if not self.recent_sizes:
            return 1
        if how == "last":
            return self.recent_sizes[-1]
        if how == "max":
            return max(self.recent_sizes)
        counts: dict[int, int] = {}
        for size in self.recent_sizes:
            counts[size] = counts.get(size, 0) + 1
        # Ties go to the larger size: a bigger hold also serves the smaller job.
        return max(counts, key=lambda size: (counts[size], size))

    def size_fit(self, size: int, how: str, prior_weight: float) -> float:
        """P(the next job needs no more than `size` GPUs), for a size picked by `how`.

        For the last job's size: how often this user's next job was no larger than the one
        before. For a mode or maximum of recent jobs: the share of recent jobs that fit.
        """
        if how == "last":
            fits, total = self.size_pairs_fit, self.size_pairs
        else:
            fits = sum(1 for recent in self.recent_sizes if recent <= size)
            total = len(self.recent_sizes)
        return shrunk_rate(fits, total, SIZE_PRIOR, prior_weight)

    def kgap_window(self, k: int) -> SortedWindow | None:
        """Window of k-step submit gaps (time from a submit to the k-th next), k >= 2."""
        index = k - 2
        return self.kgaps[index] if 0 <= index < len(self.kgaps) else None

    def season_days(self, day: int, weekend: bool, bin_index: int) -> int:
        """Days of this type already observed for a bin: complete days, plus today if active."""
        if self.first_day is None:
            return 0
        observed = count_days(self.first_day, day, weekend)
        kind = 1 if weekend else 0
        if self.season_marked[kind][bin_index] == day:
            observed += 1
        return observed

    # -- updating (the builder calls these) ----------------------------------------------

    def observe(self, event: Event) -> None:
        self.n_events += 1
        if self.first_at is None or event.at < self.first_at:
            self.first_at = event.at
            self.first_day = local_day(event.at, self.config.utc_offset_s)
        kind = event.kind
        if kind is EventKind.JOB_SUBMITTED or kind is EventKind.JOB_STARTED:
            if event.job_id is not None and event.job_id in self._open:
                # Seen already (its submit, or the same submit from a second source).
                if kind is EventKind.JOB_STARTED:
                    # Durations run from the start, not from the submit.
                    self._open[event.job_id] = (event.at, self._open[event.job_id][1])
                self._touch(event.at, AFTER_SUBMIT)
            else:
                # A start with no known submit is an arrival: some sources only report starts.
                self._arrival(event)
        elif kind is EventKind.JOB_FINISHED:
            self._finish(event)
        elif kind is EventKind.CUE and event.cue:
            self.cue_seen[event.cue] = self.cue_seen.get(event.cue, 0) + 1
            self.cue_pending[event.cue] = event.at

    def _touch(self, at: float, kind: int) -> None:
        if self.last_activity_at is None or at >= self.last_activity_at:
            self.last_activity_at = at
            self.last_activity_kind = kind

    def _arrival(self, event: Event) -> None:
        at = event.at
        gpus = max(1, event.gpus or 1)
        # Out-of-order arrivals (several sources) are counted but add no negative gap.
        if self.last_submit_at is not None and at >= self.last_submit_at:
            self.gaps.add(at - self.last_submit_at)
            for k, window in enumerate(self.kgaps, start=2):
                if len(self.submit_times) >= k:
                    window.add(at - self.submit_times[-k])
        if self.last_activity_at is not None and at >= self.last_activity_at:
            idle = at - self.last_activity_at
            self.idle_gaps.add(idle)
            self.idle_gaps_by_kind[self.last_activity_kind].add(idle)
            if self.pool is not None:
                self.pool.add(self.last_activity_kind, idle)
        if self.last_gpus is not None:
            self.size_pairs += 1
            self.size_pairs_fit += gpus <= self.last_gpus
        if self.last_submit_at is None or at >= self.last_submit_at:
            self.submit_times.append(at)
            self.last_submit_at = at
            self.last_gpus = gpus
            self.last_gpu_model = event.gpu_model
        self._touch(at, AFTER_SUBMIT)
        self.n_jobs += 1
        self.recent_sizes.append(gpus)
        self.size_counts[gpus] = self.size_counts.get(gpus, 0) + 1
        self.max_gpus = max(self.max_gpus, gpus)
        if event.job_id is not None:
            if len(self._open) >= self.config.max_open_jobs:
                # A finish we never saw must not pin memory: forget the oldest open job.
                _, dropped = self._open.pop(next(iter(self._open)))
                self.open_gpus -= dropped
            self._open[event.job_id] = (at, gpus)
            self.open_gpus += gpus
        for state in self.ewma.values():
            state.add(at, gpus)
        self._mark_season(at)
        self._resolve_cues(at)

    def _finish(self, event: Event) -> None:
        at = event.at
        if self.last_finish_at is None or at > self.last_finish_at:
            self.last_finish_at = at
        self._touch(at, AFTER_FINISH)
        opened = self._open.pop(event.job_id, None) if event.job_id is not None else None
        if opened is not None:
            self.open_gpus -= opened[1]
        duration = event.duration_s
        if duration is None and opened is not None:
            duration = at - opened[0]
        if duration is not None and duration >= 0:
            self.durations.add(duration)

    def _mark_season(self, at: float) -> None:
        offset = self.config.utc_offset_s
        day = local_day(at, offset)
        seconds = (at + offset) - day * DAY_S
        bin_index = int(seconds // self.config.season_bin_s)
        kind = 1 if is_weekend(day) else 0
        if self.season_marked[kind][bin_index] != day:
            self.season_marked[kind][bin_index] = day
            self.season_active[kind][bin_index] += 1
        self.hod_jobs[int(seconds // 3600)] += 1
        self.dow_jobs[weekday(day)] += 1

    def _resolve_cues(self, at: float) -> None:
        if not self.cue_pending:
            return
        for name, cue_at in self.cue_pending.items():
            lag = at - cue_at
            if 0 <= lag <= self.config.cue_max_lag_s:
                self.cue_hits[name] = self.cue_hits.get(name, 0) + 1
                window = self.cue_lags.get(name)
                if window is None:
                    window = self.cue_lags[name] = SortedWindow(self.config.max_gaps)
                window.add(lag)
        self.cue_pending.clear()
