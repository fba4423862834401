"""`squeue` snapshots (default columns or `-o`/`-O` with `|`): consecutive snapshots diffed
into job_submitted, job_started and job_finished."""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from datetime import tzinfo

from predictors.types import Event, EventKind
from smart_agent.parsers.base import BaseParser, to_int
from smart_agent.parsers.slurm import (
    FINISHED,
    PENDING,
    RUNNING,
    describe_job,
    gpus_in,
    phase_of,
)
from smart_agent.parsers.slurm_table import job_ref
from smart_agent.parsers.times import parse_duration, parse_time
from smart_agent.redact import Redactor

_ALIASES = {
    "JOB_ID": "JOBID",
    "STATE": "ST",
    "TIME_USED": "TIME",
    "NUM_NODES": "NODES",
    "TRES_PER_NODE": "TRES_PER_NODE",
    "GRES": "TRES_PER_NODE",
    "SUBMIT_TIME": "SUBMIT",
    "START_TIME": "START",
    "TRES_ALLOC": "TRES_ALLOC",
}
_SPLIT = re.compile(r"\s+")
_NUMBER = re.compile(r"^\d{1,12}$")
# Columns that name a job: `%i`/JobArrayID-style ids, or the parts to build one from.
ID_COLUMNS = frozenset({"JOBID", "ARRAY_JOB_ID", "ARRAY_TASK_ID", "HET_JOB_ID", "HET_JOB_OFFSET"})


@dataclass(slots=True)
class _Job:
    phase: int
    user: str | None
    gpus: int | None
    model: str | None
    elapsed: float | None
    array: bool = False  # a pending array `123_[0-3]`: gone when its tasks start, not ended


def _column(name: str) -> str:
    name = name.strip().upper().replace("-", "_").replace(" ", "_")
    return _ALIASES.get(name, name)


class SqueueParser(BaseParser):
    """A header line starts a snapshot and ends the one before. The first snapshot seen is
    a baseline (its jobs are tracked, no events: they were submitted before we looked);
    after that, a new or changed row gives its events at once, and jobs missing from a
    finished snapshot give job_finished (at the time the next header is read)."""

    name = "squeue"

    def __init__(
        self,
        user: str,
        *,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        max_jobs: int = 20_000,
        baseline: bool = False,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.max_jobs = max_jobs
        # Reading what was written before the agent looked: events only at stated times.
        self.baseline = baseline
        self.columns: list[str] | None = None
        self.pipe = False
        self.snapshots = 0  # headers seen
        self.known: dict[str, _Job] = {}
        self.current: set[str] = set()
        self.open = False  # a header was read and its snapshot not ended yet
        # Each job's last row (for `jitgpu agent inspect`), as SacctParser.records; those
        # of the first snapshot are the baseline, the state the agent starts from.
        self.records: OrderedDict[str, dict[str, object]] = OrderedDict()
        # A het job's components (`123+0`, `123+1`) on consecutive rows, read as one job.
        self._het_job: str | None = None
        self._het_rows: list[dict[str, str]] = []

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        text = line.strip()
        if not text:
            return []
        pipe = "|" in text
        cells = [c.strip() for c in (text.split("|") if pipe else _SPLIT.split(text))]
        names = [_column(c) for c in cells]
        if ("JOBID" in names or "ARRAY_JOB_ID" in names) and "ST" in names:
            events = self._flush_het(source, now) + self._end_snapshot(source, now)
            self.columns, self.pipe = names, pipe
            self.snapshots += 1
            self.open = True
            return events
        if self.columns is None:
            return None
        if not pipe and len(cells) > len(self.columns):  # NODELIST(REASON) may hold spaces
            last = len(self.columns) - 1
            cells = [*cells[:last], " ".join(cells[last:])]
        if len(cells) != len(self.columns):
            return None
        row = dict(zip(self.columns, cells, strict=True))
        row["JOBID"] = job_id_of(self.columns, cells)
        ref = job_ref(row.get("JOBID", ""))
        events = self._flush_het(source, now) if ref is None or ref.job != self._het_job else []
        if ref is not None and ref.het is not None and not ref.step:
            self._het_job = ref.job
            self._het_rows.append(row)
            return events
        got = self._row(row, source, now)
        return None if got is None and not events else events + (got or [])

    def _flush_het(self, source: str, now: float) -> list[Event]:
        """The gathered components as one job: all their GPUs, the least advanced state."""
        rows, self._het_job, self._het_rows = self._het_rows, None, []
        if not rows:
            return []
        first = min(rows, key=lambda r: phase_of(r.get("ST", "")) or 0)
        counts = [_row_gpus(r) for r in rows]
        known = [n for n, _ in counts if n is not None]
        model = next((m for _, m in counts if m), None)
        return self._row(first, source, now, (sum(known) if known else None, model)) or []

    def _row(
        self,
        row: dict[str, str],
        source: str,
        now: float,
        gpus_of: tuple[int | None, str | None] | None = None,
    ) -> list[Event] | None:
        ref = job_ref(row.get("JOBID", ""))
        phase = phase_of(row.get("ST", ""))
        if ref is None or ref.step or phase is None:
            return None
        job_id = ref.job
        gpus, model = gpus_of if gpus_of is not None else _row_gpus(row)
        elapsed = parse_duration(row.get("TIME"))
        user = row.get("USER") or None
        summary = describe_job(row.get("NAME"), row.get("PARTITION"), row.get("ST"))
        self.current.add(job_id)
        before = self.known.get(job_id)
        if before is None and len(self.known) >= self.max_jobs:
            return []
        self.known[job_id] = _Job(
            max(phase, before.phase if before else -1),
            user,
            gpus,
            model,
            elapsed,
            ref.pending_array,
        )
        self._record(job_id, row, phase, (gpus, model), ref.pending_array, now)
        if ref.pending_array:
            return []  # its tasks report themselves when they start
        if self.snapshots <= 1 or (before is not None and phase <= before.phase):
            return []  # the baseline, or nothing new
        seen = before.phase if before is not None else -1
        submit = parse_time(row.get("SUBMIT"), now, self.tz)
        start = stated_start = parse_time(row.get("START"), now, self.tz)
        if start is None and phase == RUNNING and elapsed is not None:
            start = now - elapsed
        events = []

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

        live = not self.baseline
        if not live:
            start = stated_start  # not one derived from the read time
        if seen < PENDING and (submit is not None or live):
            events.append(make(EventKind.JOB_SUBMITTED, submit))
        if seen < RUNNING <= phase and (start is not None or live):
            events.append(make(EventKind.JOB_STARTED, start))
        if phase == FINISHED and live:
            events.append(make(EventKind.JOB_FINISHED, now, elapsed))
        return events

    def _record(
        self,
        job_id: str,
        row: dict[str, str],
        phase: int,
        gpus_of: tuple[int | None, str | None],
        pending_array: bool,
        now: float,
    ) -> None:
        known = self.records.get(job_id)
        self.records[job_id] = {
            "state": row.get("ST"),
            "user": row.get("USER") or None,
            "gpus": gpus_of[0],
            "gpu_model": gpus_of[1],
            "submit": parse_time(row.get("SUBMIT"), now, self.tz),
            # A pending job's START_TIME is Slurm's estimate, not a start.
            "start": parse_time(row.get("START"), now, self.tz) if phase >= RUNNING else None,
            "end": None,
            "pending_array": pending_array,
            "baseline": bool(known["baseline"]) if known else self.snapshots <= 1,
        }
        self.records.move_to_end(job_id)
        if len(self.records) > self.max_jobs:
            self.records.popitem(last=False)

    def _gone(self, job_id: str) -> None:
        """A job a later snapshot no longer lists: ended, or a pending array's row."""
        if job_id in self.records:
            self.records[job_id]["gone"] = True

    def caught_up(self, *, source: str, now: float) -> list[Event]:
        events = self._flush_het(source, now)
        self.baseline = False  # what is written from now on is seen as it happens
        return events

    def rewound(self, *, source: str, now: float) -> None:
        self._het_job, self._het_rows = None, []

    def end_snapshot(self, *, source: str, now: float) -> list[Event]:
        """End the snapshot read last, for a reader that knows it is whole (one run of
        squeue): its missing jobs end now, not when the next run's header comes."""
        return self._flush_het(source, now) + self._end_snapshot(source, now)

    def _end_snapshot(self, source: str, now: float) -> list[Event]:
        """Jobs tracked but absent from the snapshot just ended have finished."""
        events: list[Event] = []
        if not self.open:
            return events  # ended already (end_snapshot), or none begun
        self.open = False
        if self.snapshots and self.baseline:
            for job_id in [j for j in self.known if j not in self.current]:
                del self.known[job_id]  # ended at a time no snapshot states
                self._gone(job_id)
        elif self.snapshots:
            for job_id in [j for j in self.known if j not in self.current]:
                job = self.known.pop(job_id)
                self._gone(job_id)
                if job.phase >= FINISHED or job.array:
                    continue
                events.append(
                    self.event(
                        EventKind.JOB_FINISHED,
                        now,
                        source=source,
                        user=job.user,
                        gpus=job.gpus,
                        gpu_model=job.model,
                        job_id=job_id,
                        duration_s=job.elapsed if job.phase == RUNNING else 0.0,
                    )
                )
        self.current = set()
        return events


def job_id_of(columns: list[str], cells: list[str]) -> str:
    """The job id a row names, spelt as sacct's JobID and `squeue -o %i` spell it: an array
    task `123_4` (not the raw id Slurm gives each started task), a pending array `123_[5-7]`,
    a het job component `123+1`. Built from ArrayJobID/ArrayTaskID (`%F`/`%K`) and
    HetJobID/HetJobOffset where the row has them; of several JOBID columns (`-o "%i|%A"`),
    the one that already reads so."""
    named: dict[str, str] = {}
    ids: list[str] = []
    for name, cell in zip(columns, cells, strict=True):
        if name == "JOBID":
            ids.append(cell)
        elif name in ID_COLUMNS:
            named.setdefault(name, cell)
    het, offset = named.get("HET_JOB_ID", ""), named.get("HET_JOB_OFFSET", "")
    if _NUMBER.match(het) and _NUMBER.match(offset):
        return f"{het}+{offset}"
    base, task = named.get("ARRAY_JOB_ID", ""), named.get("ARRAY_TASK_ID", "")
    if _NUMBER.match(base) and task and task.upper() != "N/A":
        # A pending array's tasks come as a range (`0-3`, `1,5`, `0-9%2`).
        return (
            f"{base}_{task}" if _NUMBER.match(task) or task.startswith("[") else f"{base}_[{task}]"
        )
    spelt = [i for i in ids if any(mark in i for mark in "_+")]
    if spelt or ids:
        return (spelt or ids)[0]
    return base


def _row_gpus(row: dict[str, str]) -> tuple[int | None, str | None]:
    """GPUs of a row: per job, else per node times nodes; 0 when the allocated TRES, or both
    per-job and per-node TRES, name no GPU (a CPU job); None when the snapshot cannot tell
    (default `squeue`, or `%b` alone: `--gpus` shows only in the per-job column)."""
    nodes = to_int(row.get("NODES")) or 1
    gpus, model = gpus_in(row.get("TRES_ALLOC") or row.get("TRES_PER_JOB"))
    if gpus is None:
        gpus, model = gpus_in(row.get("TRES_PER_NODE"))
        gpus = gpus * nodes if gpus else None
    if gpus is None and ("TRES_ALLOC" in row or ("TRES_PER_JOB" in row and "TRES_PER_NODE" in row)):
        return 0, None
    return gpus, model
