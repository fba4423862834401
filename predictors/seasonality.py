"""Time-of-day and day-of-week seasonality: the first job in the clock bins a user works in."""

from __future__ import annotations

from predictors._stats import shrunk_rate
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.history import DAY_S, UserHistory, is_weekend, local_day
from predictors.types import Forecast


class SeasonalityPredictor:
    """Forecasts demand in the coming clock bins (the builder's `season_bin_s`, an hour by default).

    For each bin overlapping [now, now + horizon_s] in which the user has not yet submitted
    today, confidence is the share of observed days (weekdays and weekend days apart when
    `split_weekend`) on which the user submitted in that bin, shrunk toward the user's overall
    share of active bins. For the bin already under way it is scaled to the part that remains,
    assuming the first job falls uniformly in the bin. This is the predictor for the start of
    the working day and other returns after a long gap, which keep-alive cannot serve.
    """

    def __init__(
        self,
        horizon_s: float = 3600.0,
        *,
        min_confidence: float = 0.3,
        split_weekend: bool = True,
        size: str = "mode",
        prior_weight: float = 2.0,
        name: str = "seasonality",
    ) -> None:
        self.horizon_s = check_positive("horizon_s", horizon_s)
        self.min_confidence = check_probability("min_confidence", min_confidence)
        self.split_weekend = split_weekend
        self.size = check_size(size)
        self.prior_weight = prior_weight
        self.name = name

    def bin_probability(self, history: UserHistory, day: int, bin_index: int) -> float | None:
        """P(the user submits in this bin on this day); None when no day was observed yet."""
        weekend = is_weekend(day)
        kinds = ((1,) if weekend else (0,)) if self.split_weekend else (0, 1)
        active = 0
        days = 0
        total = 0
        for kind in kinds:
            row = history.season_active[kind]
            active += row[bin_index]
            total += sum(row)
            days += history.season_days(day, kind == 1, bin_index)
        if days == 0:
            return None
        bins = len(history.season_active[0])
        prior = min(1.0, total / (days * bins))
        return shrunk_rate(active, days, prior, self.prior_weight)

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        if history.n_jobs == 0:
            return []
        config = history.config
        bin_s = config.season_bin_s
        offset = config.utc_offset_s
        size = history.typical_size(self.size)
        forecasts: list[Forecast] = []
        start = now
        stop = now + self.horizon_s
        while start < stop:
            day = local_day(start, offset)
            day_start = day * DAY_S - offset
            bin_index = min(max(0, int((start - day_start) // bin_s)), DAY_S // bin_s - 1)
            bin_start = day_start + bin_index * bin_s
            bin_end = bin_start + bin_s
            start = max(bin_end, start + 1.0)  # always advance, whatever the float rounding
            if history.season_marked[1 if is_weekend(day) else 0][bin_index] == day:
                continue  # already active in this bin today: burst continuation's business
            p = self.bin_probability(history, day, bin_index)
            if p is None:
                continue
            remaining = (bin_end - max(now, bin_start)) / bin_s
            if remaining < 1.0:
                # min(): at p = 1 rounding can land a hair above 1.
                p = min(1.0, p * remaining / (1.0 - p * (1.0 - remaining)))
            if p < self.min_confidence:
                continue
            forecasts.append(
                Forecast(
                    start_at=max(now, bin_start),
                    end_at=bin_end,
                    gpu_count=size,
                    confidence=p,
                    predictor=self.name,
                    rationale=f"seasonality: usually active in bin {bin_index} of the day",
                    gpu_model=history.last_gpu_model,
                    expected_duration_s=history.durations.quantile(0.5),
                    user=context.user,
                )
            )
        return forecasts
