"""Burst continuation: a user who just submitted or finished a job is likely to run another soon."""

from __future__ import annotations

from collections.abc import Callable

from predictors._stats import conditional_hit
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.history import AFTER_FINISH, UserHistory
from predictors.holdvalue import choose, outlook
from predictors.types import Forecast

# What a second saved is worth, by the size of the job it is saved for: one job's second
# (`jobs`), or the GPU-seconds a cold start of that job wastes (`gpus`: the price then weighs
# idle GPU-seconds against waiting GPU-seconds, so a large job is held as long as a small one).
WEIGHTS: dict[str, Callable[[int], float]] = {
    "jobs": lambda size: 1.0,
    "gpus": lambda size: float(size),
    "sqrt": lambda size: float(size) ** 0.5,
}


class BurstPredictor:
    """Forecasts the next job within `window_s` of the user's latest activity.

    Confidence is this user's own record: among past idle gaps (latest activity to next submit)
    that had already lasted as long as the current one, the share that ended inside the window,
    shrunk toward `prior` (69% of Helios jobs follow the previous one within 10 minutes).

    With `max_jobs` > 1 it also forecasts the 2nd..k-th job of the burst (concurrent jobs are
    what keep-alive cannot serve): P(k jobs) = P(1 job) x the share of k-step submit gaps that
    fit the window relative to 1-step gaps.

    Priced (`price` set, in seconds of time-to-GPU per idle GPU-second): the window is chosen
    per user and per moment instead of fixed. Among ends up to `window_s` after the latest
    activity it takes the one that maximises the expected time-to-GPU saved (`lead_s`, the
    warm-up, per arrival served) minus `price` x GPUs x expected idle seconds, from the user's
    idle gaps after that kind of activity (a submit or a finish), blended with every user's
    (`pool_weight` samples' worth, from the context's pool); no forecast when no window pays.
    So a large job's GPUs are kept for less time than a small one's, and a user whose next job
    rarely comes soon gets nothing. After a finish (`warm_after_finish`) the hold is valued as
    warm at once, since the ending job's GPUs can be kept; otherwise it saves only the part of
    the warm-up that has passed when the job comes. Its `size` may also be `"ending"`: right
    after a finish, the ending job's size (the GPUs that can be kept), else the last job's.
    `value_fit` weighs the saving by the chance that the next job fits the hold (the
    confidence always includes it). With `max_jobs` > 1, priced mode also holds GPUs for the
    2nd..k-th job of a clump, each worth the part of a warm-up such a job would still wait (see
    `_clump`), each with its own window by the same rule. `weigh` says what a saved second
    is worth by job size (see WEIGHTS): per job, or per GPU of the job.
    """

    def __init__(
        self,
        window_s: float = 600.0,
        *,
        max_jobs: int = 1,
        min_confidence: float = 0.0,
        size: str = "last",
        prior: float = 0.69,
        prior_weight: float = 4.0,
        price: float | None = None,
        lead_s: float = 120.0,
        pool_weight: float = 16.0,
        warm_after_finish: bool = True,
        value_fit: bool = True,
        weigh: str = "jobs",
        name: str = "burst",
    ) -> None:
        self.window_s = check_positive("window_s", window_s)
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.max_jobs = max_jobs
        self.min_confidence = check_probability("min_confidence", min_confidence)
        if size == "ending" and price is None:
            raise ValueError("size 'ending' needs a price (priced mode)")
        self.size = size if size == "ending" else check_size(size)
        self.prior = check_probability("prior", prior)
        self.prior_weight = prior_weight
        if price is not None and not price > 0:
            raise ValueError(f"price must be positive, not {price}")
        self.price = price
        # Per-user prices (a budget controller per tenant) override `price` for those users.
        self.user_prices: dict[str, float] = {}
        self.lead_s = check_positive("lead_s", lead_s)
        if pool_weight < 0:
            raise ValueError("pool_weight must not be negative")
        self.pool_weight = pool_weight
        self.warm_after_finish = warm_after_finish
        self.value_fit = value_fit
        if weigh not in WEIGHTS:
            raise ValueError(f"weigh must be one of {', '.join(WEIGHTS)}, not {weigh!r}")
        self.weigh = weigh
        self._clumps: dict[tuple[str, int], tuple[UserHistory, int, tuple[float, float]]] = {}
        self.name = name

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        anchor = history.last_activity_at
        if anchor is None or history.n_jobs == 0:
            return []
        if self.price is not None:
            return self._priced(context, now, anchor)
        end_at = anchor + self.window_s
        if end_at <= now:
            return []
        elapsed = max(0.0, now - anchor)
        size = history.typical_size(self.size)
        first = conditional_hit(
            history.idle_gaps, elapsed, 0.0, self.window_s, self.prior, self.prior_weight
        ) * history.size_fit(size, self.size, self.prior_weight)
        if first < self.min_confidence:
            return []
        duration = history.durations.quantile(0.5)
        rationale = f"burst: active {elapsed:.0f}s ago, next job within {self.window_s:.0f}s"
        forecasts = [self._forecast(context, now, end_at, size, first, duration, rationale)]
        if self.max_jobs > 1:
            one_step = history.gaps.count_le(self.window_s)
            for k in range(2, self.max_jobs + 1):
                window = history.kgap_window(k)
                if window is None or one_step == 0:
                    break
                share = min(1.0, window.count_le(self.window_s) / one_step)
                confidence = first * share
                if confidence < self.min_confidence or confidence <= 0.0:
                    break
                forecasts.append(
                    self._forecast(
                        context, now, end_at, size, confidence, duration, f"{rationale} (job {k})"
                    )
                )
        return forecasts

    def _priced(self, context: Context, now: float, anchor: float) -> list[Forecast]:
        history = context.history
        kind = history.last_activity_kind
        elapsed = max(0.0, now - anchor)
        just_ended = kind == AFTER_FINISH and elapsed == 0.0
        how = "last" if self.size == "ending" else self.size
        size = history.typical_size(how)
        fit = history.size_fit(size, how, self.prior_weight)
        if self.size == "ending" and just_ended and context.events:
            # The GPUs that can be kept are those of the job that just ended.
            size = max(1, context.events[-1].gpus or 1)
        pool = context.pool
        value_fit = fit if self.value_fit else 1.0
        view = outlook(
            history.idle_gaps_by_kind[kind],
            None if pool is None else pool.by_kind[kind],
            self.pool_weight,
            elapsed,
            lead_s=self.lead_s,
            max_end_s=self.window_s,
            prior_memo=None if pool is None else pool.memo,
        )
        if view is None:
            return []
        forecasts: list[Forecast] = []
        duration = history.durations.quantile(0.5)
        for k in range(1, self.max_jobs + 1):
            # The k-th job of a clump needs a GPU of its own: it is worth what it would wait
            # for a hold set aside as the clump's first job arrives.
            share, wait = (1.0, 1.0) if k == 1 else self._clump(history, k)
            if wait <= 0.0:
                break
            choice = choose(
                view,
                gpus=size,
                price=self.user_prices.get(context.user, self.price or 0.0),
                lead_s=self.lead_s,
                warm=self.warm_after_finish and just_ended and k == 1,
                fit=value_fit * wait * WEIGHTS[self.weigh](size),
            )
            if choice is None:
                break
            confidence = min(1.0, choice.hit * fit * share)
            if confidence < self.min_confidence or confidence <= 0.0:
                break
            rationale = (
                f"burst: active {elapsed:.0f}s ago; worth holding to {choice.end_s:.0f}s "
                f"(saves {choice.saved_s:.0f}s, idle {choice.idle_s:.0f}s per GPU)"
                + ("" if k == 1 else f" (job {k} of a clump)")
            )
            end_at = anchor + choice.end_s
            forecasts.append(
                self._forecast(context, now, end_at, size, confidence, duration, rationale)
            )
        return forecasts

    def _clump(self, history: UserHistory, k: int) -> tuple[float, float]:
        """For the k-th job of a clump (k >= 2): the share of the user's (k-1)-step submit gaps
        shorter than a warm-up, and the mean part of a warm-up such a job would still wait
        (lead - gap where positive, over lead), both shrunk toward 0 with `prior_weight`.
        Those gaps change only with an arrival, so the answer is kept per user until then."""
        key = (history.user, k)
        cached = self._clumps.get(key)
        # The same history object (not another builder's user of that name), no new arrival.
        if cached is not None and cached[0] is history and cached[1] == history.n_jobs:
            return cached[2]
        window = history.gaps if k == 2 else history.kgap_window(k - 1)
        result = (0.0, 0.0)
        if window is not None and len(window):
            lead = self.lead_s
            short = window.count_le(lead)
            waits = short * lead - window.sum_between(0.0, lead)
            total = len(window) + self.prior_weight
            result = (short / total, waits / lead / total)
        self._clumps[key] = (history, history.n_jobs, result)
        return result

    def _forecast(
        self,
        context: Context,
        now: float,
        end_at: float,
        size: int,
        confidence: float,
        duration: float | None,
        rationale: str,
    ) -> Forecast:
        return Forecast(
            start_at=now,
            end_at=end_at,
            gpu_count=size,
            confidence=confidence,
            predictor=self.name,
            rationale=rationale,
            gpu_model=context.history.last_gpu_model,
            expected_duration_s=duration,
            user=context.user,
        )
