"""A jobs CSV in the trace schema (job_id,user,submit_time_s,start_time_s,end_time_s,num_gpus,
gpu_type,status,duration_s): each row gives its submitted, started and finished events."""

from __future__ import annotations

import csv
import math
from datetime import tzinfo

from predictors.types import Event, EventKind
from smart_agent.parsers.base import BaseParser, to_int
from smart_agent.redact import Redactor

COLUMNS = (
    "job_id",
    "user",
    "submit_time_s",
    "start_time_s",
    "end_time_s",
    "num_gpus",
    "gpu_type",
    "status",
    "duration_s",
)
FINISHED_STATUSES = frozenset(
    {
        "completed",
        "failed",
        "killed",
        "cancelled",
        "canceled",
        "timeout",
        "preempted",
        "finished",
        "succeeded",
        "error",
    }
)


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) < 1e12 else None


class JobsCsvParser(BaseParser):
    """Times in the file are seconds from `t0` (0: epoch seconds). A row with an end time,
    or a duration and a finished status, also gives job_finished (at the end time, else at
    start + duration, else submit + duration where the trace has no start). A header line is
    needed first (a repeated header is fine); rows without one are unknown."""

    name = "jobs_csv"

    def __init__(
        self,
        user: str,
        *,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        t0: float = 0.0,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.t0 = t0
        self.columns: dict[str, int] | None = None

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        if not line.strip():
            return []
        try:
            cells = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            return None
        names = [c.strip().lower() for c in cells]
        if "job_id" in names and "submit_time_s" in names:
            self.columns = {name: i for i, name in enumerate(names)}
            return []
        if self.columns is None:
            return None
        columns = self.columns

        def cell(name: str) -> str:
            index = columns.get(name)
            return cells[index].strip() if index is not None and index < len(cells) else ""

        submit = _seconds(cell("submit_time_s"))
        job_id = cell("job_id")
        if submit is None or not job_id:
            return None
        start = _seconds(cell("start_time_s"))
        end = _seconds(cell("end_time_s"))
        duration = _seconds(cell("duration_s"))
        if duration is None and start is not None and end is not None and end >= start:
            duration = end - start
        status = cell("status").lower()
        gpus = to_int(cell("num_gpus"))
        model = cell("gpu_type") or None
        user = cell("user") or None

        def make(kind: EventKind, at: float, duration_s: float | None = None) -> Event:
            return self.event(
                kind,
                self.t0 + at,
                source=source,
                user=user,
                gpus=gpus,
                gpu_model=model,
                job_id=job_id,
                duration_s=duration_s,
            )

        events = [make(EventKind.JOB_SUBMITTED, submit)]
        if start is not None:
            events.append(make(EventKind.JOB_STARTED, start))
        if end is not None:
            events.append(make(EventKind.JOB_FINISHED, end, duration))
        elif duration is not None and (status in FINISHED_STATUSES or start is not None):
            began = start if start is not None else submit
            events.append(make(EventKind.JOB_FINISHED, began + duration, duration))
        return events
