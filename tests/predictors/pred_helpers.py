"""Helpers for the predictor tests: hand-made events at a fixed, known epoch."""

from __future__ import annotations

from predictors import Event, EventKind, HistoryBuilder, HistoryConfig

# 2024-01-01 00:00 UTC, a Monday: day and hour bins of every test are known by construction.
T0 = 1_704_067_200.0
DAY = 86_400.0
HOUR = 3_600.0


def submit(at: float, user: str = "alice", gpus: int = 1, job: str | None = None) -> Event:
    return Event(EventKind.JOB_SUBMITTED, at, user, gpus=gpus, job_id=job)


def start(at: float, user: str = "alice", gpus: int = 1, job: str | None = None) -> Event:
    return Event(EventKind.JOB_STARTED, at, user, gpus=gpus, job_id=job)


def finish(
    at: float,
    user: str = "alice",
    gpus: int = 1,
    job: str | None = None,
    duration: float | None = None,
) -> Event:
    return Event(EventKind.JOB_FINISHED, at, user, gpus=gpus, job_id=job, duration_s=duration)


def cue(at: float, name: str, user: str = "alice", excerpt: str | None = None) -> Event:
    return Event(EventKind.CUE, at, user, cue=name, excerpt=excerpt)


def builder_with(*events: Event, config: HistoryConfig | None = None) -> HistoryBuilder:
    builder = HistoryBuilder(config)
    builder.observe_all(events)
    return builder


def submits_at(offsets: list[float], *, user: str = "alice", gpus: int = 1) -> list[Event]:
    return [submit(T0 + offset, user, gpus) for offset in offsets]
