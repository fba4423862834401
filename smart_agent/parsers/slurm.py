"""Slurm job history: `sacct --parsable2` output, and what it shares with squeue (states, GPUs)."""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo

from predictors.types import Event, EventKind
from smart_agent.parsers.base import BaseParser, to_int
from smart_agent.parsers.slurm_table import (
    NO_HEADER_HINT,
    Layout,
    infer_columns,
    is_header,
    job_ref,
)
from smart_agent.parsers.times import parse_duration, parse_time
from smart_agent.redact import Redactor

log = logging.getLogger(__name__)
NO_STATE = "sacct rows without a State column: no job event can be read from them."

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
    """sacct output in every layout people save: `-P`, `-p` (trailing pipe), the default
    fixed-width table (its dashes line gives the columns), and rows without a header
    (`-n`): columns from `fields` (the `--format` list), else inferred from the row's shape
    with a warning in `notes`. A header may come again when runs are appended to one file,
    and a file rewritten in place is read again whole: both are diffed by job id and state.

    Each job (steps folded into it, het-job components into their job, a pending array
    `123_[0-3]` not a job) gives job_submitted, job_started and job_finished once each, as
    its state moves on, at the times its row states. A row without them gives events only
    when `live` (a change seen as it happens, stamped with the read time); in a `baseline`
    read (what was there before the agent looked) it teaches nothing but the job's state.
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
        baseline: bool = False,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.columns: dict[str, int] | None = None
        self.configured = bool(fields)
        if fields:
            self.columns = _index(fields)
        self.layout = Layout()
        self.jobs = JobPhases(max_jobs)
        self.baseline = baseline
        self.layout_name: str | None = "configured" if fields else None
        self.notes: list[str] = []
        self.max_jobs = max_jobs
        # Each job's last row (for `jitgpu agent inspect`), bounded like `jobs`.
        self.records: OrderedDict[str, dict[str, object]] = OrderedDict()
        self._het_job: str | None = None  # the het job whose component rows are gathered
        self._het_rows: dict[str, JobRow] = {}

    def caught_up(self, *, source: str, now: float) -> list[Event]:
        events = self._flush_het(source, now)  # read as the baseline, if this one is
        self.baseline = False  # what is written from now on is seen as it happens
        return events

    def rewound(self, *, source: str, now: float) -> None:
        self._het_job, self._het_rows = None, {}  # the rewritten file gives them again

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return []
        if self.layout.dashes(text):
            self.layout_name = "fixed-width"
            return []
        cells = self.layout.split(text)
        if is_header(cells):
            if "|" in text:
                self.layout.spans = None
                self.layout_name = "pipe (-p)" if text.rstrip().endswith("|") else "pipe (-P)"
            else:
                self.layout_name = "fixed-width"
            self.columns = _index(cells)
            self.configured = False
            return []
        columns = self.columns
        if columns is None or (not self.configured and self.layout_name == "inferred"):
            names = infer_columns(cells)  # `-n -P` rows, or `-n` ones split at spaces
            if names is None:
                return None
            if self.layout_name != "inferred":
                self.layout_name = "inferred"
                self.notes.append(NO_HEADER_HINT)
                log.warning("%s: %s", source, NO_HEADER_HINT)
            columns = _index(names)
        if len(cells) < 2:
            return None
        return self._row(cells, columns, source, now)

    def _row(
        self, cells: list[str], columns: dict[str, int], source: str, now: float
    ) -> list[Event] | None:
        def cell(*names: str) -> str:
            for name in names:
                index = columns.get(name)
                if index is not None and index < len(cells) and cells[index].strip():
                    return cells[index].strip()
            return ""

        ref = job_ref(cell("jobid", "jobidraw"))
        if ref is None:
            return None
        if ref.step:
            return []
        state = cell("state")
        phase = phase_of(state)
        if phase is None:
            if "state" not in columns and NO_STATE not in self.notes:
                self.notes.append(NO_STATE)  # said once; such rows cannot say what happened
            return None
        gpus, model = _row_gpus(cell)
        submit = parse_time(cell("submit"), now, self.tz)
        start = parse_time(cell("start"), now, self.tz)
        end = parse_time(cell("end"), now, self.tz)
        elapsed = parse_duration(cell("elapsed"))
        if elapsed is None:
            elapsed = elapsed_raw(cell("elapsedraw"))
        if elapsed is None and start is not None and end is not None and end >= start:
            elapsed = end - start
        row = JobRow(
            job_id=ref.job,
            state=state,
            phase=phase,
            user=cell("user") or None,
            gpus=gpus,
            gpu_model=model,
            submit=submit,
            start=start,
            end=end,
            elapsed=elapsed,
            summary=describe_job(cell("jobname"), cell("partition"), state),
            pending_array=ref.pending_array,
        )
        # A het job's components come on consecutive rows: gathered, then read as one job
        # with all their GPUs when a row of another job (or the end of the read) follows.
        events = self._flush_het(source, now) if self._het_job not in (None, ref.job) else []
        if ref.het is not None:
            self._het_job = ref.job
            self._het_rows[ref.het] = row
            return events
        return events + self._job(row, source, now)

    def _flush_het(self, source: str, now: float) -> list[Event]:
        rows = list(self._het_rows.values())
        self._het_job, self._het_rows = None, {}
        return self._job(merge_het(rows), source, now) if rows else []

    def _job(self, row: JobRow, source: str, now: float) -> list[Event]:
        job_id, phase = row.job_id, row.phase
        known = self.records.get(job_id)
        self.records[job_id] = {
            "state": row.state,
            "user": row.user,
            "gpus": row.gpus,
            "gpu_model": row.gpu_model,
            "submit": row.submit,
            "start": row.start,
            "end": row.end,
            "pending_array": row.pending_array,
            # Read before the agent looked: the state it starts from, not an arrival.
            "baseline": bool(known["baseline"]) if known else self.baseline,
        }
        self.records.move_to_end(job_id)
        if len(self.records) > self.max_jobs:
            self.records.popitem(last=False)
        if row.pending_array:
            return []  # its tasks report themselves, under their own ids, when they start
        seen = self.jobs.get(job_id)
        if phase <= seen:
            return []
        self.jobs.set(job_id, phase)
        live = not self.baseline
        submit, start, end, elapsed = row.submit, row.start, row.end, row.elapsed

        def make(kind: EventKind, at: float, duration: float | None = None) -> Event:
            return self.event(
                kind,
                at,
                source=source,
                user=row.user,
                gpus=row.gpus,
                gpu_model=row.gpu_model,
                job_id=job_id,
                duration_s=duration,
                text=row.summary,
            )

        events = []
        # The read time stands in for a missing time only for what is seen to happen now:
        # a job new in this read and not finished yet, or a start or end just seen.
        if seen < PENDING:
            at = submit if submit is not None else (now if live and phase < FINISHED else None)
            if at is not None:
                events.append(make(EventKind.JOB_SUBMITTED, at))
        # A job cancelled while pending never started: no start event for it.
        if seen < RUNNING and (phase == RUNNING or start is not None):
            at = start if start is not None else (now if live and phase == RUNNING else None)
            if at is not None:
                events.append(make(EventKind.JOB_STARTED, at))
        if phase == FINISHED:
            at = end if end is not None else (now if live and seen >= PENDING else None)
            if elapsed is None and start is None:
                elapsed = 0.0
            if at is not None:
                events.append(make(EventKind.JOB_FINISHED, at, elapsed))
        return events


@dataclass(frozen=True, slots=True)
class JobRow:
    """What one sacct row (or a het job's rows together) says of a job."""

    job_id: str
    state: str
    phase: int
    user: str | None
    gpus: int | None
    gpu_model: str | None
    submit: float | None
    start: float | None
    end: float | None
    elapsed: float | None
    summary: str | None
    pending_array: bool = False


def merge_het(rows: Sequence[JobRow]) -> JobRow:
    """A het job as one: the GPUs of all its components, the least advanced state (it has
    ended when every component has), the earliest submit and start, the latest end."""
    first = min(rows, key=lambda r: r.phase)
    counts = [r.gpus for r in rows if r.gpus is not None]

    def earliest(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return min(known) if known else None

    ends = [r.end for r in rows]
    elapsed = [r.elapsed for r in rows if r.elapsed is not None]
    return replace(
        first,
        gpus=sum(counts) if counts else None,
        gpu_model=next((r.gpu_model for r in rows if r.gpu_model), None),
        user=next((r.user for r in rows if r.user), None),
        submit=earliest([r.submit for r in rows]),
        start=earliest([r.start for r in rows]),
        end=max(e for e in ends if e is not None) if None not in ends else None,
        elapsed=max(elapsed) if elapsed else None,
    )


def _index(names: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, name in enumerate(names):
        key = name.strip().lower()
        if key and key not in out:
            out[key] = i
    return out


def _row_gpus(cell: Callable[..., str]) -> tuple[int | None, str | None]:
    """GPUs of a row: allocated, else requested; 0 when the row names TRES without a GPU
    (a CPU job), None when it has no TRES column to tell."""
    tres = ""
    for names in (("alloctres",), ("reqtres",), ("allocgres", "reqgres", "gres", "tresperjob")):
        text = cell(*names)
        if text:
            tres = tres or text
            gpus, model = gpus_in(text)
            if gpus is not None:
                return gpus, model
    return (0 if tres else None), None


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
