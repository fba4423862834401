"""Stream a job trace through the builder and predictors: per-call latency and a simple hit rate.

A sanity check of the statistical predictors on real data, not the replay (which runs the
scheduler, cold starts and capacity): here a job finishes at submit (or start) + duration,
and a job counts as covered when a hold made from an earlier forecast of the same user, at
or above `min_confidence`, covers its submit and GPU count (`predictors.online.HoldBook`).
This module reads a wall clock, but only to time the calls it measures.

    python -m predictors.tracecheck [TRACE.csv] [--rows N] [--min-confidence P]
"""

from __future__ import annotations

import argparse
import csv
import heapq
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from predictors.base import Predictor
from predictors.burst import BurstPredictor
from predictors.context import Context, HistoryBuilder
from predictors.cues import CuePredictor
from predictors.ensemble import Ensemble
from predictors.ewma import EwmaPredictor
from predictors.histogram import HistogramPredictor
from predictors.history import HistoryConfig
from predictors.online import HoldBook
from predictors.seasonality import SeasonalityPredictor
from predictors.types import Event, EventKind, Forecast

REPO = Path(__file__).resolve().parent.parent
HELIOS = "helios_venus_2020-05-28_20d.csv"
SHARED_TRACE = REPO.parent / "shared" / "traces" / HELIOS
SLICE_TRACE = REPO / "tests" / "data" / "predictors" / "helios_slice.csv"


def default_trace() -> Path:
    """The shared Helios trace beside the project, else the slice shipped with the tests."""
    return SHARED_TRACE if SHARED_TRACE.is_file() else SLICE_TRACE


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def trace_events(path: Path, rows: int | None = None) -> Iterator[Event]:
    """Submits and finishes of a trace CSV (the shared schema), in time order."""
    pending: list[tuple[float, int, Event]] = []
    order = 0
    with path.open(newline="", encoding="utf-8") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            if rows is not None and index >= rows:
                break
            submit = float(row["submit_time_s"])
            gpus = int(row["num_gpus"])
            duration = _number(row.get("duration_s", ""))
            start = _number(row.get("start_time_s", "")) or submit
            job = row["job_id"]
            user = row["user"]
            while pending and pending[0][0] <= submit:
                yield heapq.heappop(pending)[2]
            yield Event(EventKind.JOB_SUBMITTED, submit, user, gpus=gpus, job_id=job)
            if duration is not None:
                end = start + duration
                finish = Event(
                    EventKind.JOB_FINISHED, end, user, gpus=gpus, duration_s=duration, job_id=job
                )
                order += 1
                heapq.heappush(pending, (end, order, finish))
    while pending:
        yield heapq.heappop(pending)[2]


class KeepAliveReference:
    """Reference only: keep a finished job's GPUs for `keep_s` (what keep-alive would serve)."""

    def __init__(self, keep_s: float = 600.0, name: str = "keepalive-ref") -> None:
        self.keep_s = keep_s
        self.name = name

    def predict(self, context: Context, now: float) -> list[Forecast]:
        forecasts = []
        for event in context.events:
            if event.kind is EventKind.JOB_FINISHED and event.at + self.keep_s > now >= event.at:
                forecasts.append(
                    Forecast(
                        event.at,
                        event.at + self.keep_s,
                        max(1, event.gpus or 1),
                        1.0,
                        self.name,
                        user=context.user,
                    )
                )
        return forecasts


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    calls: int
    mean_us: float
    p50_us: float
    p99_us: float
    jobs: int
    covered: int
    holds: int
    claimed: int
    idle_gpu_hours: float

    @property
    def recall(self) -> float:
        return self.covered / self.jobs if self.jobs else 0.0

    @property
    def precision(self) -> float:
        return self.claimed / self.holds if self.holds else 0.0


def default_predictors() -> list[Predictor]:
    burst = BurstPredictor(max_jobs=3, name="burst-x3")
    members: list[Predictor] = [
        BurstPredictor(),
        HistogramPredictor(),
        SeasonalityPredictor(),
        EwmaPredictor(),
        CuePredictor(),
    ]
    return [
        *members,
        burst,
        KeepAliveReference(),
        Ensemble([BurstPredictor(name="b"), HistogramPredictor(name="h"), EwmaPredictor(name="e")]),
    ]


def check(
    events: Iterable[Event],
    predictors: Sequence[Predictor],
    *,
    min_confidence: float = 0.3,
    config: HistoryConfig | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> list[CheckResult]:
    """Ask every predictor at every event of the event's user; score and time the calls."""
    builder = HistoryBuilder(config)
    books: list[dict[str, HoldBook]] = [{} for _ in predictors]
    timings: list[list[float]] = [[] for _ in predictors]
    last_at = 0.0
    for event in events:
        last_at = event.at
        for per_user in books:
            book = per_user.get(event.user)
            if book is None:
                book = per_user[event.user] = HoldBook(min_confidence)
            if event.kind is EventKind.JOB_SUBMITTED:
                book.job(event.at, max(1, event.gpus or 1), event.gpu_model)
        builder.observe(event)
        context = builder.context(event.user, event.at)
        for index, predictor in enumerate(predictors):
            began = timer()
            forecasts = predictor.predict(context, event.at)
            timings[index].append(timer() - began)
            books[index][event.user].offer(forecasts, event.at)
    results = []
    for index, predictor in enumerate(predictors):
        total_jobs = covered = holds = claimed = 0
        idle = 0.0
        for book in books[index].values():
            book.expire(last_at + 7 * 86400.0)  # close whatever is still open
            s = book.score()
            total_jobs += s.jobs
            covered += s.covered
            holds += s.forecasts
            claimed += s.claimed
            idle += s.idle_gpu_s
        times = sorted(timings[index]) or [0.0]
        results.append(
            CheckResult(
                predictor.name,
                len(timings[index]),
                statistics.fmean(times) * 1e6,
                times[len(times) // 2] * 1e6,
                times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6,
                total_jobs,
                covered,
                holds,
                claimed,
                idle / 3600.0,
            )
        )
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=None)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--min-confidence", type=float, default=0.3)
    args = parser.parse_args(argv)
    path = args.trace or default_trace()
    results = check(
        trace_events(path, args.rows), default_predictors(), min_confidence=args.min_confidence
    )
    print(f"{path.name}, holds from forecasts with confidence >= {args.min_confidence}")
    print(
        f"{'predictor':<16}{'calls':>8}{'mean us':>9}{'p50 us':>8}{'p99 us':>8}"
        f"{'recall':>8}{'precision':>10}{'idle GPU-h':>12}"
    )
    for r in results:
        print(
            f"{r.name:<16}{r.calls:>8}{r.mean_us:>9.1f}{r.p50_us:>8.1f}{r.p99_us:>8.1f}"
            f"{r.recall:>8.3f}{r.precision:>10.3f}{r.idle_gpu_hours:>12.0f}"
        )


if __name__ == "__main__":
    main()
