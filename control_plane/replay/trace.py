"""Job traces in the shared CSV schema: loading, validation, and finding the shared folder."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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
REQUIRED = ("job_id", "user", "submit_time_s", "num_gpus", "duration_s")
# Optional cue columns: what a smart agent would know at submit and a scheduler would not.
# `array_size`: the whole size of the sweep (job array, loop, grid) this job starts or joins.
CUE_COLUMNS = ("array_size",)

# The shared traces sit beside the repository: <repo>/../shared/traces.
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"


class TraceError(ValueError):
    """A trace file that does not follow the schema; the message names file and line."""


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a trace: arrives at `submit`, runs `duration` once it has its GPUs."""

    seq: int
    job_id: str
    user: str
    submit: float
    gpus: int
    duration: float
    gpu_type: str | None = None
    array_size: int | None = None  # a cue column, where the trace carries one


def shared_trace(name: str) -> Path | None:
    """The path of a shared trace beside the repository, or None where it is absent."""
    path = SHARED_TRACES / name
    return path if path.is_file() else None


def load_trace(path: str | Path) -> list[Job]:
    """Jobs of a trace CSV, sorted by submit time (stable), rows with num_gpus < 1 dropped."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        jobs = parse_rows(reader, source=str(path))
    return jobs


def parse_rows(rows: Iterable[dict[str, str]], *, source: str = "trace") -> list[Job]:
    """Jobs from CSV rows. A job with no duration and no end (still running when the trace
    was cut, as in Alibaba's `alive_at_trace_end`) runs until the last time in the trace."""
    parsed: list[tuple[str, str, float, int, float | None, str | None, int | None]] = []
    last = 0.0
    for line, row in enumerate(rows, start=2):
        try:
            gpus = int(row["num_gpus"])
            submit = float(row["submit_time_s"])
            duration = _duration(row)
            cue = row.get("array_size") or None
            array_size = None if cue is None else int(cue)
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{source}:{line}: bad value ({exc})") from exc
        if gpus < 1:
            continue
        if duration is not None and duration < 0:
            raise TraceError(f"{source}:{line}: negative duration")
        if array_size is not None and array_size < 1:
            raise TraceError(f"{source}:{line}: array_size must be at least 1")
        last = max(last, submit + (duration or 0.0))
        user = row["user"] or "unknown"
        gpu_type = row.get("gpu_type") or None
        parsed.append((row["job_id"], user, submit, gpus, duration, gpu_type, array_size))
    order = sorted(range(len(parsed)), key=lambda i: (parsed[i][2], i))
    jobs: list[Job] = []
    for seq, i in enumerate(order):
        job_id, user, submit, gpus, duration, gpu_type, array_size = parsed[i]
        run = max(0.0, last - submit) if duration is None else duration
        jobs.append(Job(seq, job_id, user, submit, gpus, run, gpu_type, array_size))
    return jobs


def _duration(row: dict[str, str]) -> float | None:
    if row.get("duration_s"):
        return float(row["duration_s"])
    # No duration: end - start where a trace records both; None when the job never ended.
    start, end = row.get("start_time_s"), row.get("end_time_s")
    if start and end:
        return float(end) - float(start)
    return None
