"""Burst continuation: a user who just submitted or finished a job is likely to run another soon."""

from __future__ import annotations

from predictors._stats import conditional_hit
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.types import Forecast


class BurstPredictor:
    """Forecasts the next job within `window_s` of the user's latest activity.

    Confidence is this user's own record: among past idle gaps (latest activity to next submit)
    that had already lasted as long as the current one, the share that ended inside the window,
    shrunk toward `prior` (69% of Helios jobs follow the previous one within 10 minutes).

    With `max_jobs` > 1 it also forecasts the 2nd..k-th job of the burst (concurrent jobs are
    what keep-alive cannot serve): P(k jobs) = P(1 job) x the share of k-step submit gaps that
    fit the window relative to 1-step gaps.
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
        name: str = "burst",
    ) -> None:
        self.window_s = check_positive("window_s", window_s)
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.max_jobs = max_jobs
        self.min_confidence = check_probability("min_confidence", min_confidence)
        self.size = check_size(size)
        self.prior = check_probability("prior", prior)
        self.prior_weight = prior_weight
        self.name = name

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        anchor = history.last_activity_at
        if anchor is None or history.n_jobs == 0:
            return []
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
