"""Log cues ("preprocessing done", "training done"...) as heralds of the next job, per user."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from predictors._stats import shrunk_rate
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.types import Cue, Forecast


@dataclass(frozen=True, slots=True)
class CuePrior:
    """Before a user has a record for a cue: the job comes `low_s`..`high_s` after it, with p."""

    low_s: float
    high_s: float
    confidence: float


DEFAULT_CUE_PRIORS: Mapping[str, CuePrior] = {
    Cue.JOB_SUBMITTED: CuePrior(0.0, 300.0, 0.9),
    Cue.PREPROCESSING_DONE: CuePrior(0.0, 900.0, 0.6),
    Cue.TRAINING_DONE: CuePrior(0.0, 1800.0, 0.5),
    Cue.EPOCH_END: CuePrior(0.0, 1800.0, 0.2),
    Cue.CHECKPOINT_SAVED: CuePrior(0.0, 1800.0, 0.15),
}


class CuePredictor:
    """After a known cue that no job has followed yet, expect a job in the cue's lag window.

    Lag window: the `low_q`..`high_q` quantiles of this user's past cue-to-next-submit lags
    once there are `min_samples` of them, else the prior's. Confidence: the share of this
    user's past cues of that name followed by a job within `HistoryConfig.cue_max_lag_s`,
    shrunk toward the prior's confidence.
    """

    def __init__(
        self,
        priors: Mapping[str, CuePrior] | None = None,
        *,
        max_age_s: float = 3600.0,
        low_q: float = 0.1,
        high_q: float = 0.9,
        min_samples: int = 3,
        min_window_s: float = 60.0,
        min_confidence: float = 0.0,
        prior_weight: float = 4.0,
        size: str = "last",
        name: str = "cues",
    ) -> None:
        self.priors = dict(DEFAULT_CUE_PRIORS if priors is None else priors)
        self.max_age_s = check_positive("max_age_s", max_age_s)
        self.low_q = check_probability("low_q", low_q)
        self.high_q = check_probability("high_q", high_q)
        self.min_samples = max(1, min_samples)
        self.min_window_s = check_positive("min_window_s", min_window_s)
        self.min_confidence = check_probability("min_confidence", min_confidence)
        self.prior_weight = prior_weight
        self.size = check_size(size)
        self.name = name

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        if not history.cue_pending:
            return []
        forecasts: list[Forecast] = []
        for cue, cue_at in history.cue_pending.items():
            prior = self.priors.get(cue)
            if prior is None or not 0.0 <= now - cue_at <= self.max_age_s:
                continue
            lags = history.cue_lags.get(cue)
            if lags is not None and len(lags) >= self.min_samples:
                low = lags.quantile(self.low_q) or 0.0
                high = max(lags.quantile(self.high_q) or 0.0, low + self.min_window_s)
                learned = "learned"
            else:
                low, high, learned = prior.low_s, prior.high_s, "prior"
            end_at = cue_at + high
            if end_at <= now:
                continue
            # The pending cue itself is not yet a hit or a miss.
            resolved = max(0, history.cue_seen.get(cue, 1) - 1)
            hits = min(history.cue_hits.get(cue, 0), resolved)
            confidence = shrunk_rate(hits, resolved, prior.confidence, self.prior_weight)
            if confidence < self.min_confidence:
                continue
            forecasts.append(
                Forecast(
                    start_at=max(now, cue_at + low),
                    end_at=end_at,
                    gpu_count=history.typical_size(self.size),
                    confidence=confidence,
                    predictor=self.name,
                    rationale=f"cue {cue} {now - cue_at:.0f}s ago ({learned} lag)",
                    gpu_model=history.last_gpu_model,
                    expected_duration_s=history.durations.quantile(0.5),
                    user=context.user,
                )
            )
        return forecasts
