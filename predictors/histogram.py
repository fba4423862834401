"""Per-user gap histogram (the hybrid-histogram idea): warm from a low to a high gap percentile."""

from __future__ import annotations

from predictors._stats import SortedWindow, conditional_hit
from predictors.base import check_positive, check_probability, check_size
from predictors.context import Context
from predictors.types import Forecast

GAP_KINDS = ("idle", "submit")


class HistogramPredictor:
    """Expect the next job between the `head_q` and `tail_q` percentiles of the user's gaps.

    As in the hybrid histogram policy for serverless cold starts (Shahrad et al., ATC '20), the
    window is measured from the user's latest activity, widened by `margin`, and capped at
    `max_window_s`. When the histogram is not representative (fewer than `min_samples` gaps,
    or more than `oob_share` of them longer than `max_window_s`) it falls back to a fixed
    keep-alive window of `fallback_window_s`.

    Confidence: the share of past gaps (among those that had already lasted as long as the
    current one) that ended inside the window, shrunk toward `prior`.
    """

    def __init__(
        self,
        head_q: float = 0.05,
        tail_q: float = 0.9,
        *,
        margin: float = 0.1,
        min_samples: int = 8,
        max_window_s: float = 4 * 3600.0,
        oob_share: float = 0.5,
        fallback_window_s: float = 600.0,
        min_window_s: float = 60.0,
        min_confidence: float = 0.0,
        gaps: str = "idle",
        size: str = "last",
        prior: float = 0.5,
        prior_weight: float = 4.0,
        name: str = "histogram",
    ) -> None:
        self.head_q = check_probability("head_q", head_q)
        self.tail_q = check_probability("tail_q", tail_q)
        if self.tail_q < self.head_q:
            raise ValueError("tail_q must not be below head_q")
        self.margin = check_probability("margin", margin)
        self.min_samples = max(1, min_samples)
        self.max_window_s = check_positive("max_window_s", max_window_s)
        self.oob_share = check_probability("oob_share", oob_share)
        self.fallback_window_s = check_positive("fallback_window_s", fallback_window_s)
        self.min_window_s = check_positive("min_window_s", min_window_s)
        self.min_confidence = check_probability("min_confidence", min_confidence)
        if gaps not in GAP_KINDS:
            raise ValueError(f"gaps must be one of {', '.join(GAP_KINDS)}")
        self.gaps = gaps
        self.size = check_size(size)
        self.prior = check_probability("prior", prior)
        self.prior_weight = prior_weight
        self.name = name

    def window(self, samples: SortedWindow) -> tuple[float, float, bool]:
        """(head, tail) offsets from the anchor, and whether the histogram was representative."""
        n = len(samples)
        representative = (
            n >= self.min_samples and samples.count_gt(self.max_window_s) <= self.oob_share * n
        )
        if not representative:
            return 0.0, self.fallback_window_s, False
        head = (samples.quantile(self.head_q) or 0.0) * (1.0 - self.margin)
        tail = (samples.quantile(self.tail_q) or 0.0) * (1.0 + self.margin)
        tail = min(max(tail, head + self.min_window_s), self.max_window_s)
        return min(head, tail), tail, True

    def predict(self, context: Context, now: float) -> list[Forecast]:
        history = context.history
        if self.gaps == "idle":
            anchor, samples = history.last_activity_at, history.idle_gaps
        else:
            anchor, samples = history.last_submit_at, history.gaps
        if anchor is None or history.n_jobs == 0:
            return []
        head, tail, representative = self.window(samples)
        end_at = anchor + tail
        if end_at <= now:
            return []
        elapsed = max(0.0, now - anchor)
        size = history.typical_size(self.size)
        confidence = conditional_hit(
            samples, elapsed, head, tail, self.prior, self.prior_weight
        ) * history.size_fit(size, self.size, self.prior_weight)
        if confidence < self.min_confidence:
            return []
        how = "histogram" if representative else "fallback keep-alive"
        return [
            Forecast(
                start_at=max(now, anchor + head),
                end_at=end_at,
                gpu_count=size,
                confidence=confidence,
                predictor=self.name,
                rationale=f"{how}: gap {head:.0f}-{tail:.0f}s after last activity",
                gpu_model=history.last_gpu_model,
                expected_duration_s=history.durations.quantile(0.5),
                user=context.user,
            )
        ]
