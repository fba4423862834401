"""The holds to score: the agent's real holds (acted rows, outcomes as logged) and the virtual
holds each member's shadow forecasts would have made, matched against the logged jobs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from predictors.scoring import ForecastRecord, JobRecord, covers
from predictors.types import Forecast
from smart_agent.review.query import ForecastRow, JobRow

ACTED = "acted"
SHADOW = "shadow"
UNRESOLVED = ("pending", "open")


@dataclass(frozen=True, slots=True)
class Held:
    """One hold and what became of it.

    `status` is the logged outcome for a real hold, and hit, miss or open (its window not over
    yet) for a virtual one. `row` is the forecast that made it; `repeats` counts the later
    shadow forecasts that an open virtual hold already covered (not held again).
    """

    role: str
    predictor: str
    row: ForecastRow
    record: ForecastRecord
    status: str
    idle_gpu_s: float
    repeats: int = 0

    @property
    def resolved(self) -> bool:
        return self.status not in UNRESOLVED

    @property
    def hit(self) -> bool:
        return self.record.hit


def job_records(jobs: list[JobRow]) -> list[JobRecord]:
    """The jobs that wanted GPUs, for matching; an unknown GPU count counts as one GPU."""
    return [
        JobRecord(j.user, j.at, j.gpus or 1, j.gpu_model, str(j.id)) for j in jobs if j.gpus != 0
    ]


def acted_holds(rows: list[ForecastRow], jobs: list[JobRow]) -> list[Held]:
    """The holds the agent really made, with the outcome, lead and idle time the log records."""
    job_of_hold = {j.hold_id: j.id for j in jobs if j.hold_id}
    out = []
    for row in rows:
        if row.shadow or row.hold_id is None:
            continue
        forecast = row.forecast(gpus=row.hold_gpus)
        if forecast is None:
            continue
        claimed_at = job_id = None
        if row.outcome == "claimed":
            claimed_at = row.claimed_at if row.claimed_at is not None else row.outcome_at
            job = row.job_id if row.job_id is not None else job_of_hold.get(row.hold_id)
            job_id = None if job is None else str(job)
        record = ForecastRecord(forecast, row.made_at, claimed_at, job_id)
        idle = (row.idle_gpu_minutes or 0.0) * 60.0
        out.append(Held(ACTED, row.predictor, row, record, row.outcome or "pending", idle))
    return out


@dataclass(slots=True)
class _Open:
    row: ForecastRow
    forecast: Forecast
    claimed_at: float | None = None
    job_id: str | None = None
    repeats: int = 0


def _repeat_of(held: Forecast, new: Forecast) -> bool:
    # The policy's rule: a window an active hold already covers is not held again.
    return (
        held.user == new.user
        and held.start_at <= new.end_at
        and new.start_at <= held.end_at
        and held.gpu_count >= new.gpu_count
        and held.gpu_model in (None, new.gpu_model)
    )


def _serve(holds: list[_Open], job: JobRecord) -> None:
    """A job takes the open hold that covers it and ends first (then smallest, then most
    confident), the rule of `predictors.scoring.match`."""
    best: _Open | None = None
    for h in holds:
        if h.claimed_at is None and covers(h.forecast, h.row.made_at, job):
            key = (h.forecast.end_at, h.forecast.gpu_count, -h.forecast.confidence)
            if best is None or key < (
                best.forecast.end_at,
                best.forecast.gpu_count,
                -best.forecast.confidence,
            ):
                best = h
    if best is not None:
        best.claimed_at = job.submit_at
        best.job_id = job.job_id


def _virtual(rows: list[ForecastRow], jobs: list[JobRecord]) -> list[_Open]:
    """One member's shadow forecasts as the holds a policy would have kept, in time order.

    A predictor asked every cycle repeats itself; counting each repeat as a hold of its own
    would make every member look imprecise, so a forecast whose window an open, unclaimed
    hold already covers is counted on that hold instead.
    """
    made: list[_Open] = []
    open_: list[_Open] = []
    queue = sorted(jobs, key=lambda j: j.submit_at)
    j = 0
    for row in rows:
        while j < len(queue) and queue[j].submit_at < row.made_at:
            _serve(open_, queue[j])
            j += 1
        forecast = row.forecast()
        if forecast is None:
            continue
        open_ = [h for h in open_ if h.claimed_at is None and h.forecast.end_at >= row.made_at]
        same = next((h for h in open_ if _repeat_of(h.forecast, forecast)), None)
        if same is not None:
            same.repeats += 1
            continue
        hold = _Open(row, forecast)
        made.append(hold)
        open_.append(hold)
    for job in queue[j:]:
        open_ = [h for h in open_ if h.claimed_at is None and h.forecast.end_at >= job.submit_at]
        _serve(open_, job)
    return made


def shadow_holds(rows: list[ForecastRow], jobs: list[JobRecord], *, now: float) -> list[Held]:
    """Each member's virtual holds, scored against every logged job, acted on or not."""
    by_member: dict[str, list[ForecastRow]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r.made_at, r.id)):
        if row.shadow:
            by_member[row.predictor].append(row)
    out = []
    for member, member_rows in by_member.items():
        for h in _virtual(member_rows, jobs):
            record = ForecastRecord(h.forecast, h.row.made_at, h.claimed_at, h.job_id)
            status = "hit" if record.hit else "open" if h.forecast.end_at > now else "miss"
            out.append(Held(SHADOW, member, h.row, record, status, record.idle_gpu_s, h.repeats))
    return out
