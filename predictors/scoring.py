"""Pure scoring of forecasts (or the holds made from them) against the jobs that really came.

Shared by the ensemble, the trace check and the prediction-log review. Rules:

- A forecast *covers* a job when it was made no later than the job's submit, the submit falls
  in [start_at, end_at], the forecast has at least the job's GPUs, the GPU models do not
  conflict (either unset, or equal) and the users do not conflict.
- Each forecast serves at most one job and each job is served by at most one forecast (a hold
  is claimed once); among the candidates a job takes the one ending first (then the smallest,
  then the most confident), which leaves the longer windows for later jobs.
- Idle GPU-seconds: the hold is counted warm from `start_at` (the lead before it is warming
  time, not idle) until it is claimed or its window ends, times its GPU count. GPUs of an
  over-sized hold beyond the job's are released at the claim and not counted after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from predictors.types import FREE, Cost, Forecast


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job that happened: who submitted it, when, and what it asked for."""

    user: str
    submit_at: float
    gpus: int
    gpu_model: str | None = None
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class ForecastRecord:
    """A forecast (or the hold made from it), when it was made, and what became of it."""

    forecast: Forecast
    made_at: float
    claimed_at: float | None = None
    job_id: str | None = None

    @property
    def hit(self) -> bool:
        return self.claimed_at is not None

    @property
    def lead_s(self) -> float | None:
        """How long before the job the forecast was made (None when unclaimed)."""
        return None if self.claimed_at is None else self.claimed_at - self.made_at

    @property
    def idle_gpu_s(self) -> float:
        f = self.forecast
        until = f.end_at if self.claimed_at is None else min(self.claimed_at, f.end_at)
        return f.gpu_count * max(0.0, until - f.start_at)


@dataclass(frozen=True, slots=True)
class Score:
    """Totals from which the rates follow; totals add up across users, days and files."""

    forecasts: int = 0
    claimed: int = 0
    jobs: int = 0
    covered: int = 0
    idle_gpu_s: float = 0.0
    lead_s_total: float = 0.0
    confidence_total: float = 0.0
    cost: Cost = field(default=FREE)

    def __add__(self, other: Score) -> Score:
        return Score(
            self.forecasts + other.forecasts,
            self.claimed + other.claimed,
            self.jobs + other.jobs,
            self.covered + other.covered,
            self.idle_gpu_s + other.idle_gpu_s,
            self.lead_s_total + other.lead_s_total,
            self.confidence_total + other.confidence_total,
            self.cost + other.cost,
        )

    @property
    def precision(self) -> float:
        """Share of (resolved) holds that a job claimed."""
        return self.claimed / self.forecasts if self.forecasts else 0.0

    @property
    def recall(self) -> float:
        """Share of jobs that found a hold waiting."""
        return self.covered / self.jobs if self.jobs else 0.0

    @property
    def mean_lead_s(self) -> float | None:
        return self.lead_s_total / self.claimed if self.claimed else None

    @property
    def idle_gpu_minutes(self) -> float:
        return self.idle_gpu_s / 60.0

    @property
    def idle_gpu_hours(self) -> float:
        return self.idle_gpu_s / 3600.0

    @property
    def calibration(self) -> float | None:
        """Claimed / expected-claimed: above 1, the predictor is under-confident."""
        if self.confidence_total <= 0.0:
            return None
        return self.claimed / self.confidence_total

    def utility(self, idle_gpu_hour_weight: float = 0.5, usd_weight: float = 1.0) -> float:
        """Net value per job: jobs served warm, minus idle GPU-hours and dollars, in jobs."""
        net = self.covered - idle_gpu_hour_weight * self.idle_gpu_hours - usd_weight * self.cost.usd
        return net / max(self.jobs, 1)


def covers(forecast: Forecast, made_at: float, job: JobRecord) -> bool:
    if made_at > job.submit_at:
        return False
    if forecast.user is not None and forecast.user != job.user:
        return False
    return forecast.covers(job.submit_at, job.gpus, job.gpu_model)


def _preference(record: ForecastRecord) -> tuple[float, int, float]:
    f = record.forecast
    return (f.end_at, f.gpu_count, -f.confidence)


def match(
    forecasts: Iterable[ForecastRecord] | Iterable[tuple[Forecast, float]],
    jobs: Iterable[JobRecord],
) -> list[ForecastRecord]:
    """Pair forecasts with the jobs they served; returns every forecast with its outcome.

    Accepts records (already-known outcomes are ignored and recomputed) or (forecast,
    made_at) pairs. A sweep over time: O((F + J) log F + J x active forecasts).
    """
    records = [
        item if isinstance(item, ForecastRecord) else ForecastRecord(item[0], item[1])
        for item in forecasts
    ]
    order = sorted(range(len(records)), key=lambda i: records[i].forecast.start_at)
    outcome: list[ForecastRecord] = [ForecastRecord(r.forecast, r.made_at) for r in records]
    active: list[int] = []
    cursor = 0
    for job in sorted(jobs, key=lambda j: j.submit_at):
        while cursor < len(order) and records[order[cursor]].forecast.start_at <= job.submit_at:
            active.append(order[cursor])
            cursor += 1
        active = [i for i in active if outcome[i].claimed_at is None]
        active = [i for i in active if records[i].forecast.end_at >= job.submit_at]
        best: int | None = None
        for i in active:
            if covers(records[i].forecast, records[i].made_at, job) and (
                best is None or _preference(records[i]) < _preference(records[best])
            ):
                best = i
        if best is not None:
            r = records[best]
            outcome[best] = ForecastRecord(r.forecast, r.made_at, job.submit_at, job.job_id)
    return outcome


def score(
    records: Sequence[ForecastRecord], jobs: int | Sequence[JobRecord], *, now: float | None = None
) -> Score:
    """Totals for a set of forecast outcomes and the jobs they were meant for.

    With `now`, forecasts whose window is still open and unclaimed are left out (they are
    neither hit nor miss yet).
    """
    n_jobs = jobs if isinstance(jobs, int) else len(jobs)
    forecasts = claimed = 0
    idle = lead = confidence = 0.0
    cost = FREE
    for record in records:
        f = record.forecast
        cost = cost + f.cost
        if record.claimed_at is None and now is not None and f.end_at > now:
            continue
        forecasts += 1
        confidence += f.confidence
        idle += record.idle_gpu_s
        if record.claimed_at is not None:
            claimed += 1
            lead += record.claimed_at - record.made_at
    return Score(forecasts, claimed, n_jobs, claimed, idle, lead, confidence, cost)
