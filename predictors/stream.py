"""Bridge from a stream of jobs to hold requests: each forecast slot is asked for only once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from predictors.base import Predictor
from predictors.context import HistoryBuilder
from predictors.history import HistoryConfig
from predictors.types import Event, EventKind, Forecast


@dataclass(slots=True)
class _Slot:
    start_at: float
    end_at: float
    gpu_count: int
    gpu_model: str | None


class StreamForecaster:
    """Keeps a history from observed jobs and turns a predictor's answers into new demand.

    Predictors are asked after every event and repeat themselves (a burst forecast is the
    same slot, refreshed). A caller that turns each forecast into a hold would double its
    holds, so this bridge remembers the open slots of each user and returns only what is
    new: a forecast for a slot not yet asked for, or the extension of an asked-for slot
    (starting where it ended). An arriving job uses up the slot that would serve it (the
    scoring rule), so the next forecast for the same slot is new demand again.

    Fits the replay's forecaster protocol: `observe_arrival(job, now)`,
    `observe_finish(job, now)` (a job with `job_id`, `user`, `submit`, `gpus`, `duration`
    and optionally `gpu_type`) and `forecast(now)`. Users are asked when they had an event
    since the last `forecast`, and every `refresh_s` otherwise (None: only after events).

    With `new_only=False` every forecast of the users asked is returned as it is, and the
    caller deduplicates (the replay adapter's top-up mode asks only for GPUs a user does not
    hold yet).
    """

    def __init__(
        self,
        predictor: Predictor,
        *,
        config: HistoryConfig | None = None,
        min_confidence: float = 0.0,
        refresh_s: float | None = None,
        new_only: bool = True,
    ) -> None:
        self.predictor = predictor
        self.builder = HistoryBuilder(config)
        self.min_confidence = min_confidence
        self.refresh_s = refresh_s
        self.new_only = new_only
        self._slots: dict[str, list[_Slot]] = {}
        self._dirty: set[str] = set()
        self._asked_at: dict[str, float] = {}

    # -- events ---------------------------------------------------------------------------

    def observe(self, event: Event) -> None:
        # Same rule as the history: a repeated submit or the start of a submitted job is no
        # new arrival.
        known = event.job_id is not None and self.builder.history(event.user).is_open(event.job_id)
        arrival = not known and event.kind in (EventKind.JOB_SUBMITTED, EventKind.JOB_STARTED)
        self.builder.observe(event)
        self._dirty.add(event.user)
        if arrival and self.new_only:
            self._use_slot(event)

    def observe_arrival(self, job: Any, now: float) -> None:
        self.observe(
            Event(
                EventKind.JOB_SUBMITTED,
                now,
                str(job.user),
                gpus=int(job.gpus),
                gpu_model=getattr(job, "gpu_type", None),
                job_id=str(job.job_id),
            )
        )

    def observe_finish(self, job: Any, now: float) -> None:
        duration = getattr(job, "duration", None)
        self.observe(
            Event(
                EventKind.JOB_FINISHED,
                now,
                str(job.user),
                gpus=int(job.gpus),
                duration_s=None if duration is None else float(duration),
                job_id=str(job.job_id),
            )
        )

    def _use_slot(self, event: Event) -> None:
        slots = self._slots.get(event.user)
        if not slots:
            return
        gpus = max(1, event.gpus or 1)
        best: _Slot | None = None
        for slot in slots:
            if (
                slot.start_at <= event.at <= slot.end_at
                and slot.gpu_count >= gpus
                and (slot.gpu_model is None or event.gpu_model in (None, slot.gpu_model))
                and (best is None or (slot.end_at, slot.gpu_count) < (best.end_at, best.gpu_count))
            ):
                best = slot
        if best is not None:
            slots.remove(best)

    # -- forecasts ------------------------------------------------------------------------

    def forecast(self, now: float) -> list[Forecast]:
        users = set(self._dirty)
        self._dirty.clear()
        if self.refresh_s is not None:
            users.update(
                user
                for user in self.builder.users()
                if now - self._asked_at.get(user, -float("inf")) >= self.refresh_s
            )
        demand: list[Forecast] = []
        for user in sorted(users):
            self._asked_at[user] = now
            context = self.builder.context(user, now)
            forecasts = self.predictor.predict(context, now)
            if self.new_only:
                demand.extend(self._new_parts(user, forecasts, now))
            else:
                demand.extend(
                    f if f.user is not None else replace(f, user=user)
                    for f in forecasts
                    if f.confidence >= self.min_confidence and f.end_at >= now
                )
        return demand

    def _new_parts(self, user: str, forecasts: list[Forecast], now: float) -> list[Forecast]:
        slots = [slot for slot in self._slots.get(user, []) if slot.end_at >= now]
        used: list[_Slot] = []
        parts: list[Forecast] = []
        for f in forecasts:
            if f.confidence < self.min_confidence or f.end_at < now:
                continue
            if f.user is None:
                f = replace(f, user=user)
            match = next(
                (
                    slot
                    for slot in slots
                    if slot.gpu_count == f.gpu_count
                    and slot.gpu_model == f.gpu_model
                    and f.start_at <= slot.end_at
                    and f.end_at >= slot.start_at
                    and all(slot is not u for u in used)
                ),
                None,
            )
            if match is None:
                slot = _Slot(f.start_at, f.end_at, f.gpu_count, f.gpu_model)
                slots.append(slot)
                used.append(slot)
                parts.append(f)
                continue
            used.append(match)
            if f.end_at > match.end_at:
                parts.append(replace(f, start_at=match.end_at))
                match.end_at = f.end_at
        self._slots[user] = slots
        return parts
