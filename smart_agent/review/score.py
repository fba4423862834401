"""Scores per predictor and per ISO week: holds claimed, jobs covered, lead, idle GPU-hours,
time-to-GPU saved and LLM dollars, each beside the statistical baseline's shadow figures."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from predictors.scoring import Score, score
from predictors.types import FREE
from smart_agent.predictor_set import BASELINE
from smart_agent.review.holds import ACTED, SHADOW, Held, acted_holds, job_records, shadow_holds
from smart_agent.review.query import ForecastRow, JobRow, Selection, Zone, week_of

ALL = "all"


@dataclass(frozen=True, slots=True)
class TimeToGpu:
    """The cold start a warm job avoided, estimated from the same log's cold jobs."""

    cold_median_s: float | None
    cold_jobs: int
    warm_median_s: float | None
    warm_jobs: int

    @classmethod
    def from_jobs(cls, jobs: Sequence[JobRow]) -> TimeToGpu:
        cold = [j.time_to_gpu_s for j in jobs if not j.warm and j.time_to_gpu_s is not None]
        warm = [j.time_to_gpu_s for j in jobs if j.warm and j.time_to_gpu_s is not None]
        return cls(
            statistics.median(cold) if cold else None,
            len(cold),
            statistics.median(warm) if warm else None,
            len(warm),
        )

    def saved(self, time_to_gpu_s: float | None) -> float | None:
        """Seconds a warm job gained: the median cold time-to-GPU minus its own."""
        if self.cold_median_s is None:
            return None
        return max(0.0, self.cold_median_s - (time_to_gpu_s or 0.0))

    @property
    def per_covered_job(self) -> float | None:
        """What a job a shadow predictor covered would have gained (median cold - warm)."""
        return self.saved(self.warm_median_s)

    @property
    def method(self) -> str:
        if self.cold_median_s is None:
            return (
                "time-to-GPU saved: unknown, no cold job with a recorded time-to-GPU in the "
                "selection to estimate a cold start from"
            )
        return (
            f"time-to-GPU saved = for each warm job, the median time-to-GPU of the "
            f"{self.cold_jobs} cold job(s) in the selection ({self.cold_median_s:.1f} s) "
            f"minus its own; for a shadow predictor, each job it would have covered counts "
            f"{self.per_covered_job or 0.0:.1f} s (that median minus the median warm "
            f"time-to-GPU, {self.warm_median_s or 0.0:.1f} s)"
        )


@dataclass(slots=True)
class Line:
    """One predictor's figures in one period, acted (real holds) or shadow (virtual holds)."""

    period: str
    predictor: str
    role: str
    score: Score
    outcomes: dict[str, int]
    ttg_saved_s: float | None
    is_baseline: bool = False
    vs_baseline: dict[str, float | None] | None = None

    def as_dict(self) -> dict[str, Any]:
        s = self.score
        return {
            "period": self.period,
            "predictor": self.predictor,
            "role": self.role,
            "baseline": self.is_baseline,
            "holds": s.forecasts,
            "claimed": s.claimed,
            "precision": s.precision if s.forecasts else None,
            "jobs": s.jobs,
            "covered": s.covered,
            "recall": s.recall if s.jobs else None,
            "mean_lead_s": s.mean_lead_s,
            "idle_gpu_hours": s.idle_gpu_hours,
            "time_to_gpu_saved_s": self.ttg_saved_s,
            "calibration": s.calibration,
            "llm_usd": s.cost.usd,
            "prompt_tokens": s.cost.prompt_tokens,
            "completion_tokens": s.cost.completion_tokens,
            "outcomes": self.outcomes,
            "vs_baseline": self.vs_baseline,
        }


@dataclass(slots=True)
class Period:
    """An ISO week (or the whole selection, "all"): totals and one line per predictor."""

    label: str
    jobs: int = 0
    warm_jobs: int = 0
    ttg_saved_s: float | None = None
    idle_gpu_hours: float = 0.0
    llm_calls: int = 0
    llm_usd: float = 0.0
    llm_tokens: int = 0
    lines: list[Line] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "period": self.label,
            "jobs": self.jobs,
            "warm_jobs": self.warm_jobs,
            "time_to_gpu_saved_s": self.ttg_saved_s,
            "idle_gpu_hours": self.idle_gpu_hours,
            "llm_calls": self.llm_calls,
            "llm_usd": self.llm_usd,
            "llm_tokens": self.llm_tokens,
            "lines": [line.as_dict() for line in self.lines],
        }


@dataclass(slots=True)
class Scores:
    periods: list[Period]
    baseline: str | None
    time_to_gpu: TimeToGpu
    holds: list[Held]
    now: float

    @property
    def total(self) -> Period:
        return self.periods[-1]

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "time_to_gpu": {
                "cold_median_s": self.time_to_gpu.cold_median_s,
                "cold_jobs": self.time_to_gpu.cold_jobs,
                "warm_median_s": self.time_to_gpu.warm_median_s,
                "warm_jobs": self.time_to_gpu.warm_jobs,
                "method": self.time_to_gpu.method,
            },
            "weeks": [p.as_dict() for p in self.periods[:-1]],
            "all": self.total.as_dict(),
        }


def pick_baseline(rows: Sequence[ForecastRow]) -> str | None:
    """`burst` when it ran in shadow, else the first statistical member (no prompt, no cost)."""
    order: list[str] = []
    llm: set[str] = set()
    for row in rows:
        if not row.shadow:
            continue
        if row.predictor not in order:
            order.append(row.predictor)
        if row.prompt_version or row.prompt_tokens or row.completion_tokens or row.usd:
            llm.add(row.predictor)
    statistical = [name for name in order if name not in llm]
    if BASELINE in statistical:
        return BASELINE
    return statistical[0] if statistical else None


def _line(
    period: str,
    key: tuple[str, str],
    holds: list[Held],
    rows: list[ForecastRow],
    jobs: list[JobRow],
    covered_ids: set[str],
    ttg: TimeToGpu,
) -> Line:
    role, predictor = key
    resolved = [h for h in holds if h.resolved]
    covered = [j for j in jobs if str(j.id) in covered_ids]
    cost = sum((r.cost for r in rows), FREE)
    s = score([h.record for h in resolved], len(jobs))
    # The log's idle time for real holds (the server's placed-to-claim time), the window's
    # for virtual ones; jobs covered in this period, whichever period the hold was made in.
    s = replace(s, covered=len(covered), idle_gpu_s=sum(h.idle_gpu_s for h in resolved), cost=cost)
    outcomes = Counter(h.status for h in holds)
    if role == ACTED:
        outcomes.update(r.decision for r in rows if r.decision in ("rejected", "refused"))
        saved = [ttg.saved(j.time_to_gpu_s) for j in covered if j.warm]
        ttg_saved = None if ttg.cold_median_s is None else sum(x or 0.0 for x in saved)
    else:
        outcomes["repeats"] = sum(h.repeats for h in holds)
        per_job = ttg.per_covered_job
        ttg_saved = None if per_job is None else per_job * len(covered)
    return Line(period, predictor, role, s, dict(sorted(outcomes.items())), ttg_saved)


def _versus(line: Line, base: Line) -> dict[str, float | None]:
    a, b = line.as_dict(), base.as_dict()
    out: dict[str, float | None] = {}
    for name in ("precision", "recall", "idle_gpu_hours", "time_to_gpu_saved_s", "llm_usd"):
        out[name] = None if a[name] is None or b[name] is None else a[name] - b[name]
    return out


def compute(
    selection: Selection, *, now: float, tz: Zone, predictors: Sequence[str] = ()
) -> Scores:
    """Score every predictor in the selection per ISO week (in `tz`) and over all of it.

    `predictors` keeps only those lines and holds (and the baseline's); the baseline is chosen
    from the whole selection, so load it without a predictor filter. A period's totals (jobs,
    warm jobs, idle GPU-hours of the agent's holds, LLM calls) do not depend on `predictors`.
    """
    gpu_jobs = [j for j in selection.jobs if j.gpus != 0]
    holds = acted_holds(selection.forecasts, gpu_jobs) + shadow_holds(
        selection.forecasts, job_records(gpu_jobs), now=now
    )
    ttg = TimeToGpu.from_jobs(gpu_jobs)
    baseline = pick_baseline(selection.forecasts)

    rows_by: dict[tuple[str, str], list[ForecastRow]] = defaultdict(list)
    for row in selection.forecasts:
        rows_by[(SHADOW if row.shadow else ACTED, row.predictor)].append(row)
    holds_by: dict[tuple[str, str], list[Held]] = defaultdict(list)
    covered_by: dict[tuple[str, str], set[str]] = defaultdict(set)
    for h in holds:
        holds_by[(h.role, h.predictor)].append(h)
        if h.record.job_id is not None:
            covered_by[(h.role, h.predictor)].add(h.record.job_id)
    # Acted lines first (what really happened), then the members in shadow, by name.
    keys = sorted(set(rows_by) | set(holds_by), key=lambda k: (k[0] != ACTED, k[1]))
    if predictors:
        keys = [k for k in keys if k[1] in predictors or (k[0] == SHADOW and k[1] == baseline)]

    # Group once by week: a log of 60-second cycles holds thousands of rows a day.
    week = {r.id: week_of(r.made_at, tz) for r in selection.forecasts}
    job_week = {j.id: week_of(j.at, tz) for j in gpu_jobs}
    call_week = [week_of(c.at, tz) for c in selection.llm_calls]
    labels = sorted(set(week.values()) | set(job_week.values()) | set(call_week))
    rows_in: dict[tuple[str, tuple[str, str]], list[ForecastRow]] = defaultdict(list)
    holds_in: dict[tuple[str, tuple[str, str]], list[Held]] = defaultdict(list)
    for key, rows in rows_by.items():
        for r in rows:
            rows_in[(week[r.id], key)].append(r)
            rows_in[(ALL, key)].append(r)
    for key, key_holds in holds_by.items():
        for h in key_holds:
            holds_in[(week[h.row.id], key)].append(h)
            holds_in[(ALL, key)].append(h)

    periods = []
    for label in [*labels, ALL]:

        def inside(w: str, label: str = label) -> bool:
            return label in (ALL, w)

        jobs = [j for j in gpu_jobs if inside(job_week[j.id])]
        lines = [
            _line(
                label,
                key,
                holds_in[(label, key)],
                rows_in[(label, key)],
                jobs,
                covered_by[key],
                ttg,
            )
            for key in keys
        ]
        base = next((x for x in lines if x.role == SHADOW and x.predictor == baseline), None)
        for line in lines:
            line.is_baseline = line is base
            if base is not None and line is not base:
                line.vs_baseline = _versus(line, base)
        warm = [j for j in jobs if j.warm]
        acted_idle = sum(
            h.idle_gpu_s
            for key in holds_by
            if key[0] == ACTED
            for h in holds_in[(label, key)]
            if h.resolved
        )
        calls = [c for c, w in zip(selection.llm_calls, call_week, strict=True) if inside(w)]
        saved = [ttg.saved(j.time_to_gpu_s) for j in warm]
        periods.append(
            Period(
                label,
                jobs=len(jobs),
                warm_jobs=len(warm),
                ttg_saved_s=None if ttg.cold_median_s is None else sum(x or 0.0 for x in saved),
                idle_gpu_hours=acted_idle / 3600.0,
                llm_calls=len(calls),
                llm_usd=sum(c.usd or 0.0 for c in calls),
                llm_tokens=sum((c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in calls),
                lines=lines,
            )
        )
    kept = set(keys)
    return Scores(periods, baseline, ttg, [h for h in holds if (h.role, h.predictor) in kept], now)


@dataclass(frozen=True, slots=True)
class Bin:
    """Resolved holds whose confidence fell in [low, high), and how many were claimed."""

    low: float
    high: float
    holds: int
    hits: int
    mean_confidence: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.holds if self.holds else 0.0


def calibration(holds: Sequence[Held], bins: int = 10) -> dict[tuple[str, str], list[Bin]]:
    """Confidence bins against the observed hit rate, per role and predictor (empty bins out)."""
    acc: dict[tuple[str, str], list[list[float]]] = {}
    for h in holds:
        if not h.resolved:
            continue
        slots = acc.setdefault((h.role, h.predictor), [[0, 0, 0.0] for _ in range(bins)])
        c = h.record.forecast.confidence
        slot = slots[min(bins - 1, int(c * bins))]
        slot[0] += 1
        slot[1] += int(h.hit)
        slot[2] += c
    return {
        key: [
            Bin(i / bins, (i + 1) / bins, int(n), int(hits), total / n)
            for i, (n, hits, total) in enumerate(slots)
            if n
        ]
        for key, slots in acc.items()
    }
