"""Ensemble: weight or select predictors per user by their scored record, falling back safely."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from predictors.base import Predictor, check_probability
from predictors.context import Context
from predictors.online import HoldBook
from predictors.scoring import Score
from predictors.types import Cost, EventKind, Forecast

log = logging.getLogger(__name__)

MODES = ("weighted", "select")


@dataclass(slots=True)
class _UserState:
    books: dict[str, HoldBook]
    last_seq: int = 0
    calls: int = 0
    seen_ids: deque[str] = field(default_factory=lambda: deque(maxlen=256))
    seeded: dict[str, Score] = field(default_factory=dict)


class Ensemble:
    """Combines member predictors per user, judged by what their forecasts would have earned.

    Each member's forecasts are scored online (`HoldBook`: precision of holds claimed, recall
    of jobs covered, idle GPU-hours, dollars) from the job events the contexts carry, and
    its utility (`Score.utility`) is compared with the `baseline` member's. Once a user has
    `min_jobs` jobs on record, a member whose utility falls below the baseline's by more than
    `tolerance` gets weight 0 and stops contributing until its record recovers.

    - `weighted`: all members with weight > 0 contribute; where two members forecast the same
      slot (same size and model, overlapping windows) the more confident forecast is kept.
    - `select`: only the member with the best utility contributes (the baseline until the
      record is long enough); when it fails (raises, or reports `last_failed`), the baseline's
      forecasts are used instead.

    With `calibrate`, a member's confidences are rescaled by its record's claimed/expected
    ratio. Members flagged `expensive` (the LLM) with weight 0 are only asked on every
    `probe_every`-th call, so their record can recover without paying for every cycle.
    Members may expose `last_failed: bool` and `last_cost: Cost` (the LLM predictor does).
    """

    def __init__(
        self,
        members: Sequence[Predictor],
        *,
        baseline: str | None = None,
        mode: str = "weighted",
        min_confidence: float = 0.2,
        min_jobs: int = 20,
        tolerance: float = 0.0,
        idle_gpu_hour_weight: float = 0.5,
        usd_weight: float = 1.0,
        decay: float = 0.995,
        calibrate: bool = True,
        probe_every: int = 10,
        name: str = "ensemble",
    ) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError("member names must be unique")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.members = list(members)
        self.baseline = baseline or names[0]
        if self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not a member")
        self.mode = mode
        self.min_confidence = check_probability("min_confidence", min_confidence)
        self.min_jobs = min_jobs
        self.tolerance = tolerance
        self.idle_gpu_hour_weight = idle_gpu_hour_weight
        self.usd_weight = usd_weight
        self.decay = decay
        self.calibrate = calibrate
        self.probe_every = max(1, probe_every)
        self.name = name
        self._users: dict[str, _UserState] = {}

    # -- record ---------------------------------------------------------------------------

    def _state(self, user: str) -> _UserState:
        state = self._users.get(user)
        if state is None:
            books = {m.name: HoldBook(self.min_confidence, self.decay) for m in self.members}
            state = self._users[user] = _UserState(books)
        return state

    def record(self, user: str, member: str) -> Score:
        """The member's record for the user: seeded totals plus what was scored online."""
        state = self._state(user)
        online = state.books[member].score()
        seeded = state.seeded.get(member)
        return online if seeded is None else seeded + online

    def seed(self, user: str, member: str, score: Score) -> None:
        """Start from a record scored elsewhere (the prediction-log review)."""
        self._state(user).seeded[member] = score

    def utility(self, user: str, member: str) -> float:
        state = self._state(user)
        seeded = state.seeded.get(member)
        if seeded is None:
            return state.books[member].utility(self.idle_gpu_hour_weight, self.usd_weight)
        return (seeded + state.books[member].score()).utility(
            self.idle_gpu_hour_weight, self.usd_weight
        )

    def weights(self, user: str) -> dict[str, float]:
        """1.0 for members at least as useful as the baseline (or without enough record)."""
        base = self.utility(user, self.baseline)
        weights: dict[str, float] = {}
        for member in self.members:
            enough = self.record(user, member.name).jobs >= self.min_jobs
            worse = self.utility(user, member.name) < base - self.tolerance
            keep = member.name == self.baseline or not enough or not worse
            weights[member.name] = 1.0 if keep else 0.0
        return weights

    def _observe(self, context: Context, state: _UserState) -> None:
        for event in context.new_events(state.last_seq):
            if event.kind not in (EventKind.JOB_SUBMITTED, EventKind.JOB_STARTED):
                continue
            if event.job_id is not None:
                if event.job_id in state.seen_ids:
                    continue  # the start of a submitted job, or a submit seen twice
                state.seen_ids.append(event.job_id)
            gpus = max(1, event.gpus or 1)
            for book in state.books.values():
                book.job(event.at, gpus, event.gpu_model)
        state.last_seq = context.seq

    # -- predicting -----------------------------------------------------------------------

    def predict(self, context: Context, now: float) -> list[Forecast]:
        state = self._state(context.user)
        self._observe(context, state)
        state.calls += 1
        for book in state.books.values():
            book.expire(now)
        weights = self.weights(context.user)
        produced: dict[str, list[Forecast]] = {}
        failed: set[str] = set()
        for member in self.members:
            expensive = getattr(member, "expensive", False)
            if weights[member.name] == 0.0 and expensive and state.calls % self.probe_every:
                continue
            forecasts = self._ask(member, context, now)
            if forecasts is None or getattr(member, "last_failed", False):
                failed.add(member.name)
                forecasts = forecasts or []
            book = state.books[member.name]
            book.offer(forecasts, now)
            cost = getattr(member, "last_cost", None)
            book.add_cost(cost if isinstance(cost, Cost) else _sum_cost(forecasts))
            produced[member.name] = forecasts
        if self.mode == "select":
            chosen = self._select(context.user, weights, produced, failed)
            return self._rescale(context.user, chosen, produced.get(chosen, []))
        merged: list[tuple[str, Forecast]] = []
        for name, forecasts in produced.items():
            if weights[name] > 0.0:
                _merge(merged, name, self._rescale(context.user, name, forecasts))
        return [forecast for _, forecast in merged]

    def _ask(self, member: Predictor, context: Context, now: float) -> list[Forecast] | None:
        try:
            return list(member.predict(context, now))
        except Exception:  # a member must never take the agent or the replay down
            log.exception("predictor %s failed; using the others", member.name)
            return None

    def _select(
        self,
        user: str,
        weights: dict[str, float],
        produced: dict[str, list[Forecast]],
        failed: set[str],
    ) -> str:
        healthy = [
            m.name
            for m in self.members
            if m.name in produced and m.name not in failed and weights[m.name] > 0.0
        ]
        # A member without enough record is not chosen over the baseline on hope alone.
        proven = [
            name
            for name in healthy
            if name == self.baseline or self.record(user, name).jobs >= self.min_jobs
        ]
        candidates = proven or healthy
        if not candidates:
            return self.baseline
        return max(candidates, key=lambda name: (self.utility(user, name), name == self.baseline))

    def _rescale(self, user: str, member: str, forecasts: list[Forecast]) -> list[Forecast]:
        if not self.calibrate or not forecasts:
            return forecasts
        record = self.record(user, member)
        ratio = record.calibration
        if ratio is None or record.forecasts < self.min_jobs:
            return forecasts
        ratio = min(2.0, max(0.0, ratio))
        return [replace(f, confidence=min(1.0, f.confidence * ratio)) for f in forecasts]


def _sum_cost(forecasts: list[Forecast]) -> Cost:
    total = Cost()
    for forecast in forecasts:
        total = total + forecast.cost
    return total


def _merge(merged: list[tuple[str, Forecast]], member: str, forecasts: list[Forecast]) -> None:
    """Add one member's forecasts, keeping the more confident of two that name the same slot."""
    taken: set[int] = set()
    for f in forecasts:
        for index, (owner, other) in enumerate(merged):
            if (
                owner != member
                and index not in taken
                and other.gpu_count == f.gpu_count
                and other.gpu_model == f.gpu_model
                and f.start_at <= other.end_at
                and other.start_at <= f.end_at
            ):
                taken.add(index)
                if f.confidence > other.confidence:
                    merged[index] = (member, f)
                break
        else:
            taken.add(len(merged))
            merged.append((member, f))
