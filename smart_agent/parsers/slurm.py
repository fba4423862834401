"""Slurm job history: `sacct --parsable2` output, and what it shares with squeue (states, GPUs)."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from datetime import tzinfo

from predictors.types import Event, EventKind
from smart_agent.parsers.base import BaseParser, to_int
from smart_agent.parsers.times import parse_duration, parse_time
from smart_agent.redact import Redactor

PENDING, RUNNING, FINISHED = 0, 1, 2
_STATES = {
    PENDING: "PENDING PD REQUEUED RQ REQUEUE_HOLD REQUEUE_FED RF CONFIGURING CF RESV_DEL_HOLD RD",
    RUNNING: "RUNNING R COMPLETING CG SUSPENDED S STOPPED ST RESIZING RS SIGNALING SI STAGE_OUT SO",
    FINISHED: "COMPLETED CD FAILED F CANCELLED CA TIMEOUT TO OUT_OF_MEMORY OOM NODE_FAIL NF "
    "PREEMPTED PR BOOT_FAIL BF DEADLINE DL REVOKED RV SPECIAL_EXIT SE",
}
PHASE: dict[str, int] = {code: phase for phase, codes in _STATES.items() for code in codes.split()}

_TRES_GPU = re.compile(r"gres/gpu(?::(?P<model>[^=,:]+))?=(?P<n>\d{1,7})")
_GRES_GPU = re.compile(r"gpu(?::(?P<model>[A-Za-z][\w.-]*))?[:=](?P<n>\d{1,7})")
_STEP = re.compile(r"\.(?:\d+|batch|extern|interactive)$")


def phase_of(state: str) -> int | None:
    """PENDING, RUNNING or FINISHED for a Slurm state name or code ("CANCELLED by 1000",
    "CANCELLED+", "CD"); None for anything else."""
    word = state.strip().split(" ", 1)[0].rstrip("+").upper()
    return PHASE.get(word)


def gpus_in(text: str | None) -> tuple[int | None, str | None]:
    """GPU count and model from TRES (`gres/gpu:a100=4`) or GRES (`gpu:a100:4`) text."""
    if not text:
        return None, None
    typed: list[tuple[str, int]] = []
    untyped: int | None = None
    for found in _TRES_GPU.finditer(text):
        if found.group("model"):
            typed.append((found.group("model"), int(found.group("n"))))
        else:
            untyped = int(found.group("n"))
    if untyped is None and not typed:
        for found in _GRES_GPU.finditer(text):
            if found.group("model"):
                typed.append((found.group("model"), int(found.group("n"))))
            else:
                untyped = (untyped or 0) + int(found.group("n"))
    count = untyped if untyped is not None else (sum(n for _, n in typed) if typed else None)
    model = typed[0][0] if typed else None
    return (count if count else None), model


class JobPhases:
    """The furthest phase each job has been seen in, bounded (oldest jobs forgotten)."""

    def __init__(self, max_jobs: int = 20_000) -> None:
        self.max_jobs = max_jobs
        self._seen: OrderedDict[str, int] = OrderedDict()

    def get(self, job_id: str) -> int:
        return self._seen.get(job_id, -1)

    def set(self, job_id: str, phase: int) -> None:
        self._seen[job_id] = phase
        self._seen.move_to_end(job_id)
        if len(self._seen) > self.max_jobs:
            self._seen.popitem(last=False)

    def pop(self, job_id: str) -> None:
        self._seen.pop(job_id, None)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._seen


class SacctParser(BaseParser):
    """`sacct --parsable2` (pipe-separated, header line first; a header may come again when
    the output of several runs is appended to one file). Each job (steps are skipped) gives
    job_submitted, job_started and job_finished once each, as its state moves on; a job seen
    first in a later state gets the earlier events too, at the times its row records.

    Without a header line, pass the column names as `fields` (for `--noheader` output).
    """

    name = "sacct"

    def __init__(
        self,
        user: str,
        *,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        fields: Sequence[str] | None = None,
        max_jobs: int = 20_000,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.columns: dict[str, int] | None = None
        if fields:
            self.columns = {name.strip().lower(): i for i, name in enumerate(fields)}
        self.jobs = JobPhases(max_jobs)

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        text = line.strip("\r\n")
        if not text.strip():
            return []
        cells = text.split("|")
        head = cells[0].strip().lower()
        if head in ("jobid", "jobidraw"):
            self.columns = {name.strip().lower(): i for i, name in enumerate(cells)}
            return []
        columns = self.columns
        if columns is None or len(cells) < 2:
            return None

        def cell(*names: str) -> str:
            for name in names:
                index = columns.get(name)
                if index is not None and index < len(cells) and cells[index].strip():
                    return cells[index].strip()
            return ""

        job_id = cell("jobid", "jobidraw")
        if not job_id:
            return None
        if _STEP.search(job_id):
            return []
        phase = phase_of(cell("state"))
        if phase is None:
            return None
        gpus, model = gpus_in(cell("alloctres"))
        if gpus is None:
            gpus, model = gpus_in(cell("reqtres"))
        if gpus is None:
            gpus, model = gpus_in(cell("allocgres", "reqgres", "gres", "reqtres"))
        submit = parse_time(cell("submit"), now, self.tz)
        start = parse_time(cell("start"), now, self.tz)
        end = parse_time(cell("end"), now, self.tz)
        elapsed = parse_duration(cell("elapsed"))
        if elapsed is None:
            elapsed = elapsed_raw(cell("elapsedraw"))
        if elapsed is None and start is not None and end is not None and end >= start:
            elapsed = end - start
        user = cell("user") or None
        summary = describe_job(cell("jobname"), cell("partition"), cell("state"))
        seen = self.jobs.get(job_id)
        if phase <= seen:
            return []
        self.jobs.set(job_id, phase)

        def make(kind: EventKind, at: float | None, duration: float | None = None) -> Event:
            return self.event(
                kind,
                at if at is not None else now,
                source=source,
                user=user,
                gpus=gpus,
                gpu_model=model,
                job_id=job_id,
                duration_s=duration,
                text=summary,
            )

        events = []
        if seen < PENDING:
            events.append(make(EventKind.JOB_SUBMITTED, submit))
        # A job cancelled while pending never started: no start event for it.
        if seen < RUNNING and (phase == RUNNING or start is not None):
            events.append(make(EventKind.JOB_STARTED, start))
        if phase == FINISHED:
            if elapsed is None and start is None:
                elapsed = 0.0
            events.append(make(EventKind.JOB_FINISHED, end, elapsed))
        return events


def describe_job(name: str | None, partition: str | None, state: str | None) -> str | None:
    """A short excerpt for a job's events (name, partition, state): what an LLM may read."""
    parts = [
        f"{key}={value}"
        for key, value in (("name", name), ("partition", partition), ("state", state))
        if value
    ]
    return " ".join(parts) or None


def elapsed_raw(text: str) -> float | None:
    value = to_int(text)
    return None if value is None else float(value)
