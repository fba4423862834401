"""Online scoring: the holds a stream of forecasts would have made, and how the jobs used them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from predictors.scoring import Score
from predictors.types import Cost, Forecast


@dataclass(slots=True)
class _Hold:
    start_at: float
    end_at: float
    gpu_count: int
    gpu_model: str | None
    made_at: float
    confidence: float


class HoldBook:
    """Virtual holds of one predictor for one user, scored like `predictors.scoring`.

    A predictor asked at every event repeats itself: a forecast that overlaps an open hold of
    the same size extends that hold instead of adding one (what a caller that refreshes its
    holds would do), while several forecasts from one call stay several holds (a burst of k
    jobs). Only forecasts at or above `min_confidence` become holds, as under a pre-warm
    policy. Totals decay by `decay` per job so that the record follows a changing user.
    """

    __slots__ = (
        "_holds",
        "claimed",
        "completion_tokens",
        "confidence_total",
        "covered",
        "decay",
        "forecasts",
        "idle_gpu_s",
        "jobs",
        "lead_s_total",
        "min_confidence",
        "prompt_tokens",
        "usd",
    )

    def __init__(self, min_confidence: float = 0.0, decay: float = 1.0) -> None:
        self.min_confidence = min_confidence
        self.decay = decay
        self._holds: list[_Hold] = []
        self.forecasts = 0.0
        self.claimed = 0.0
        self.jobs = 0.0
        self.covered = 0.0
        self.idle_gpu_s = 0.0
        self.lead_s_total = 0.0
        self.confidence_total = 0.0
        self.prompt_tokens = 0.0
        self.completion_tokens = 0.0
        self.usd = 0.0

    @property
    def open_holds(self) -> int:
        return len(self._holds)

    def offer(self, forecasts: Iterable[Forecast], now: float) -> None:
        """Turn one call's forecasts into holds (merged with the open ones they continue)."""
        used: list[_Hold] = []
        for f in forecasts:
            if f.confidence < self.min_confidence or f.end_at < now:
                continue
            start = max(f.start_at, now)
            for hold in self._holds:
                if (
                    hold.gpu_count == f.gpu_count
                    and hold.gpu_model == f.gpu_model
                    and start <= hold.end_at
                    and f.end_at >= hold.start_at
                    and all(hold is not other for other in used)
                ):
                    hold.end_at = max(hold.end_at, f.end_at)
                    if hold.start_at > now:  # not warm yet: it may move earlier
                        hold.start_at = min(hold.start_at, start)
                    hold.confidence = max(hold.confidence, f.confidence)
                    used.append(hold)
                    break
            else:
                hold = _Hold(start, f.end_at, f.gpu_count, f.gpu_model, now, f.confidence)
                self._holds.append(hold)
                used.append(hold)

    def add_cost(self, cost: Cost) -> None:
        self.prompt_tokens += cost.prompt_tokens
        self.completion_tokens += cost.completion_tokens
        self.usd += cost.usd

    def expire(self, now: float) -> None:
        """Close every hold whose window ended before `now` as a miss."""
        if not self._holds:
            return
        kept: list[_Hold] = []
        for hold in self._holds:
            if hold.end_at < now:
                self._close(hold, None)
            else:
                kept.append(hold)
        self._holds = kept

    def job(self, at: float, gpus: int, gpu_model: str | None = None) -> bool:
        """A job arrived: claim the best open hold for it. Returns whether one was found."""
        self.expire(at)
        if self.decay != 1.0:
            self._decay()
        self.jobs += 1
        best: _Hold | None = None
        for hold in self._holds:
            if (
                hold.start_at <= at <= hold.end_at
                and hold.gpu_count >= gpus
                and (hold.gpu_model is None or gpu_model is None or hold.gpu_model == gpu_model)
                and (
                    best is None
                    or (hold.end_at, hold.gpu_count, -hold.confidence)
                    < (best.end_at, best.gpu_count, -best.confidence)
                )
            ):
                best = hold
        if best is None:
            return False
        self._holds.remove(best)
        self._close(best, at)
        self.covered += 1
        return True

    def _close(self, hold: _Hold, claimed_at: float | None) -> None:
        until = hold.end_at if claimed_at is None else min(claimed_at, hold.end_at)
        self.forecasts += 1
        self.confidence_total += hold.confidence
        self.idle_gpu_s += hold.gpu_count * max(0.0, until - hold.start_at)
        if claimed_at is not None:
            self.claimed += 1
            self.lead_s_total += claimed_at - hold.made_at

    def _decay(self) -> None:
        d = self.decay
        self.forecasts *= d
        self.claimed *= d
        self.jobs *= d
        self.covered *= d
        self.idle_gpu_s *= d
        self.lead_s_total *= d
        self.confidence_total *= d
        self.prompt_tokens *= d
        self.completion_tokens *= d
        self.usd *= d

    def score(self) -> Score:
        """The (decayed) totals; counts are rounded, rates keep their fractions in utility."""
        return Score(
            forecasts=round(self.forecasts),
            claimed=round(self.claimed),
            jobs=round(self.jobs),
            covered=round(self.covered),
            idle_gpu_s=self.idle_gpu_s,
            lead_s_total=self.lead_s_total,
            confidence_total=self.confidence_total,
            cost=Cost(round(self.prompt_tokens), round(self.completion_tokens), self.usd),
        )

    def utility(self, idle_gpu_hour_weight: float = 0.5, usd_weight: float = 1.0) -> float:
        """`Score.utility` on the unrounded totals (small decayed records stay comparable)."""
        net = self.covered - idle_gpu_hour_weight * self.idle_gpu_s / 3600.0 - usd_weight * self.usd
        return net / max(self.jobs, 1.0)
