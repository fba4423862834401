"""EWMA of demand: the user's recent arrival rate, decayed with a half-life, projected ahead."""

from __future__ import annotations

import math

from predictors._stats import poisson_at_least
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.types import Forecast

MODES = ("jobs", "volume")


class EwmaPredictor:
    """Projects the exponentially weighted arrival rate over the next `horizon_s`.

    The rate is kept by the history builder for each half-life in
    `HistoryConfig.ewma_half_lives_s` (so a call costs O(1)); a half-life not tracked there is
    a configuration error, raised on the first call.

    Mode `jobs`: one forecast per expected job (up to `max_jobs`), sized like the user's
    typical job; the k-th has confidence P(N >= k) for N ~ Poisson(rate x horizon).
    Mode `volume`: one forecast of all the GPUs expected in the horizon (rounded up), for
    sizing a shared warm pool from the aggregate history; confidence P(N >= 1).
    """

    def __init__(
        self,
        half_life_s: float = 3600.0,
        horizon_s: float = 600.0,
        *,
        max_jobs: int = 1,
        min_confidence: float = 0.0,
        mode: str = "jobs",
        size: str = "mode",
        name: str = "ewma",
    ) -> None:
        self.half_life_s = check_positive("half_life_s", half_life_s)
        self.horizon_s = check_positive("horizon_s", horizon_s)
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.max_jobs = max_jobs
        self.min_confidence = check_probability("min_confidence", min_confidence)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.mode = mode
        self.size = check_size(size)
        self.name = name

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        state = history.ewma.get(self.half_life_s)
        if state is None:
            raise ValueError(
                f"half-life {self.half_life_s}s is not tracked: "
                "add it to HistoryConfig.ewma_half_lives_s"
            )
        if history.n_jobs == 0:
            return []
        jobs_rate, gpus_rate = state.rates_at(now)
        expected_jobs = jobs_rate * self.horizon_s
        end_at = now + self.horizon_s
        duration = history.durations.quantile(0.5)
        if self.mode == "volume":
            confidence = poisson_at_least(1, expected_jobs)
            if confidence < self.min_confidence or confidence <= 0.0:
                return []
            gpus = max(1, math.ceil(gpus_rate * self.horizon_s - 1e-9))
            return [
                Forecast(
                    start_at=now,
                    end_at=end_at,
                    gpu_count=gpus,
                    confidence=confidence,
                    predictor=self.name,
                    rationale=f"ewma: {expected_jobs:.2f} jobs, {gpus} GPUs expected",
                    expected_duration_s=duration,
                    user=context.user,
                )
            ]
        size = history.typical_size(self.size)
        forecasts: list[Forecast] = []
        for k in range(1, self.max_jobs + 1):
            confidence = poisson_at_least(k, expected_jobs)
            if confidence < self.min_confidence or confidence <= 0.0:
                break
            forecasts.append(
                Forecast(
                    start_at=now,
                    end_at=end_at,
                    gpu_count=size,
                    confidence=confidence,
                    predictor=self.name,
                    rationale=f"ewma: {expected_jobs:.2f} jobs expected (job {k})",
                    gpu_model=history.last_gpu_model,
                    expected_duration_s=duration,
                    user=context.user,
                )
            )
        return forecasts
