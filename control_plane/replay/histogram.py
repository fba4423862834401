"""The hybrid histogram policy (Shahrad et al., ATC'20 "Serverless in the Wild"), per user."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import sqrt

from control_plane.replay.policies import Control, Policy, number, parse_options, register_policy
from control_plane.replay.trace import Job

BIN_S = 60.0
RANGE_S = 4 * 3600.0
HEAD_PCT = 5.0
TAIL_PCT = 99.0
MARGIN = 0.10
CV_THRESHOLD = 2.0
MIN_SAMPLES = 5
MAX_OUT_OF_RANGE = 0.5


@dataclass
class GapHistogram:
    """Inter-arrival gaps of one user in `bin_s` bins up to `range_s`; longer ones are counted
    apart as out of range."""

    bins: list[int]
    bin_s: float = BIN_S
    out_of_range: int = 0
    samples: int = 0
    _sum: int = field(default=0, repr=False)
    _sum_sq: int = field(default=0, repr=False)

    @classmethod
    def empty(cls, range_s: float = RANGE_S, bin_s: float = BIN_S) -> GapHistogram:
        return cls([0] * max(1, int(range_s // bin_s)), bin_s)

    def add(self, gap_s: float) -> None:
        self.samples += 1
        i = int(max(0.0, gap_s) // self.bin_s)
        if i >= len(self.bins):
            self.out_of_range += 1
            return
        old = self.bins[i]
        self.bins[i] = old + 1
        # Running sums keep the coefficient of variation O(1) per update.
        self._sum += 1
        self._sum_sq += 2 * old + 1

    def cv(self) -> float:
        """Coefficient of variation of the bin counts: high when gaps concentrate."""
        n = len(self.bins)
        if not self._sum:
            return 0.0
        mean = self._sum / n
        var = max(0.0, self._sum_sq / n - mean * mean)
        return sqrt(var) / mean

    def percentile_bin(self, pct: float) -> int:
        """Index of the bin holding the `pct` percentile of the in-range gaps."""
        target = self._sum * pct / 100.0
        seen = 0
        for i, count in enumerate(self.bins):
            seen += count
            if count and seen >= target:
                return i
        return len(self.bins) - 1


class HybridHistogram(Policy):
    """Per user: pre-warm at the head (5th percentile) of the inter-arrival gaps, keep alive
    to the tail (99th), each with a 10% margin; where the histogram is not representative
    (too few gaps, bin counts too flat, or most gaps beyond its range) fall back to plain
    keep-alive after each job.

    Gaps are measured between a user's arrivals rather than from a job's end, because one
    user's GPU jobs overlap: the window opens at each arrival and sizes the hold like the
    job that just arrived. As in the paper a warm instance is not thrown away inside its
    window: a windowed job that ends before its window closes keeps its own (warm) GPUs for
    its user until then, as far as the user's holds do not already cover its size.
    """

    def __init__(
        self,
        range_s: float = RANGE_S,
        fallback_s: float | None = None,
        min_samples: int = MIN_SAMPLES,
        cv_threshold: float = CV_THRESHOLD,
    ) -> None:
        self.range_s = range_s
        self.fallback_s = range_s if fallback_s is None else fallback_s
        self.min_samples = min_samples
        self.cv_threshold = cv_threshold
        self._hist: dict[str, GapHistogram] = {}
        self._last: dict[str, float] = {}
        self._windowed: dict[int, float] = {}  # job seq -> when its window closes

    def representative(self, hist: GapHistogram) -> bool:
        if hist.samples < self.min_samples:
            return False
        if hist.out_of_range > MAX_OUT_OF_RANGE * hist.samples:
            return False
        return hist.cv() >= self.cv_threshold

    def windows(self, hist: GapHistogram) -> tuple[float, float]:
        """(pre-warm, keep-alive end) after an arrival, in seconds, margins applied."""
        head = hist.percentile_bin(HEAD_PCT) * hist.bin_s * (1.0 - MARGIN)
        tail = (hist.percentile_bin(TAIL_PCT) + 1) * hist.bin_s * (1.0 + MARGIN)
        return head, max(tail, head)

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        user = job.user
        hist = self._hist.get(user)
        if hist is None:
            hist = self._hist[user] = GapHistogram.empty(self.range_s)
        previous = self._last.get(user)
        self._last[user] = now
        if previous is not None:
            hist.add(now - previous)
        if self.representative(hist):
            head, tail = self.windows(hist)
            ctl.hold(user, job.gpus, now + head, tail - head)
            self._windowed[job.seq] = now + tail

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        closes = self._windowed.pop(job.seq, None)
        if closes is None:
            ctl.retain(job, job.gpus, self.fallback_s)
            return
        short = job.gpus - ctl.held_gpus(job.user)
        if closes > now and short > 0:
            ctl.retain(job, short, closes - now)


def _hybrid(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=("range", "fallback", "min_samples", "cv"))
    range_s = number(options, "range", RANGE_S, minimum=BIN_S)
    return HybridHistogram(
        range_s=range_s,
        fallback_s=number(options, "fallback", range_s),
        min_samples=int(number(options, "min_samples", MIN_SAMPLES, minimum=1)),
        cv_threshold=number(options, "cv", CV_THRESHOLD),
    )


register_policy(
    "hybrid-histogram",
    _hybrid,
    "per-user gap histogram (ATC'20): pre-warm at p5, keep to p99; else keep-alive "
    "(options range=, fallback=, min_samples=, cv=)",
)
