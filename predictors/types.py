"""The value types every predictor speaks: events in, forecasts (with their cost) out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class EventKind(StrEnum):
    JOB_SUBMITTED = "job_submitted"
    JOB_STARTED = "job_started"
    JOB_FINISHED = "job_finished"
    CUE = "cue"


class Cue(StrEnum):
    """Cue names the parsers emit and the predictors know; other names pass through unused."""

    PREPROCESSING_DONE = "preprocessing_done"
    EPOCH_END = "epoch_end"
    TRAINING_DONE = "training_done"
    CHECKPOINT_SAVED = "checkpoint_saved"
    JOB_SUBMITTED = "job_submitted"


ALL_USERS = "*"
"""User name of the aggregate history (every user's events together), for warm-pool sizing."""


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    at: float
    user: str
    gpus: int | None = None
    gpu_model: str | None = None
    duration_s: float | None = None
    job_id: str | None = None
    cue: str | None = None
    excerpt: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Cost:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.usd + other.usd,
        )

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


FREE = Cost()


@dataclass(frozen=True, slots=True)
class Forecast:
    """Expected demand: `gpu_count` GPUs wanted by a job arriving in [start_at, end_at].

    `confidence` is the predictor's probability that such a job arrives in the window.
    """

    start_at: float
    end_at: float
    gpu_count: int
    confidence: float
    predictor: str
    rationale: str = ""
    gpu_model: str | None = None
    expected_duration_s: float | None = None
    cost: Cost = field(default=FREE)
    prompt_version: str | None = None
    user: str | None = None

    def __post_init__(self) -> None:
        # Cheap checks only: this runs tens of thousands of times in a replay.
        if not (math.isfinite(self.start_at) and math.isfinite(self.end_at)):
            raise ValueError("forecast window must be finite")
        if self.end_at < self.start_at:
            raise ValueError("forecast ends before it starts")
        if self.gpu_count < 1:
            raise ValueError("forecast needs at least one GPU")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError("confidence must be in [0, 1]")

    @property
    def window_s(self) -> float:
        return self.end_at - self.start_at

    @property
    def ttl_s(self) -> float:
        """How long a hold made for this forecast stays claimable after `start_at`."""
        return self.end_at - self.start_at

    def covers(self, at: float, gpus: int, gpu_model: str | None = None) -> bool:
        """Would a hold made from this forecast serve a job arriving at `at`?"""
        if not self.start_at <= at <= self.end_at or gpus > self.gpu_count:
            return False
        return self.gpu_model is None or gpu_model is None or self.gpu_model == gpu_model
