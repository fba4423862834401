"""Slurm's tables as people save them: `-P`/`-p` pipes, the default fixed-width layout with
its dashes line, rows without a header (columns from config or inferred), and job ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")
_JOB_ID = re.compile(
    r"^(?P<base>\d{1,12})(?:_(?P<task>\d{1,9}|\[[\d,\-%:]+\]))?(?:\+(?P<het>\d{1,4}))?"
    r"(?P<step>\.(?:\d+|batch|extern|interactive|[A-Za-z]\w*))?$"
)
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?$")
_NO_TIME = frozenset({"Unknown", "None", "N/A"})
_DURATION = re.compile(r"^(?:\d{1,5}-)?\d{1,2}:\d{2}:\d{2}$")
_TRES_KEYS = ("cpu=", "node=", "billing=", "mem=", "gres/")
_STATE_WORDS = frozenset(
    (
        *("PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "COMPLETED", "FAILED"),
        *("CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"),
        *("DEADLINE", "REVOKED", "SPECIAL_EXIT"),
    )
)
# What a header-less row needs to be understood without guessing.
NO_HEADER_HINT = (
    "sacct rows without a header: columns inferred from their shape (job id, state, times, "
    "elapsed, TRES); user and name are not inferred. Set the watch entry's `sacct_fields` "
    "to the --format list to read them exactly."
)


@dataclass(frozen=True, slots=True)
class JobRef:
    """A Slurm job id taken apart: the job it counts as, and what kind of row it is."""

    job: str  # the id events carry: `123`, `123_4`; a het job's components fold into `123`
    step: bool  # `.batch`, `.extern`, `.0`: part of a job, not a job
    pending_array: bool  # `123_[0-3]`: tasks not started yet, not a job of its own


def job_ref(text: str) -> JobRef | None:
    """The job a JobID cell names, or None when it is not a Slurm job id."""
    found = _JOB_ID.match(text.strip())
    if found is None:
        return None
    task = found.group("task")
    pending = task is not None and task.startswith("[")
    job = found.group("base") + (f"_{task}" if task else "")
    return JobRef(job, found.group("step") is not None, pending)


def is_header(cells: list[str]) -> bool:
    """A header of sacct: `JobID` or `JobIDRaw` as first column (any case)."""
    return bool(cells) and cells[0].strip().lower() in ("jobid", "jobidraw")


class Layout:
    """How rows are split: by `|` (with `-p`'s trailing pipe dropped), or by the character
    spans the dashes line under a fixed-width header gives."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int | None]] | None = None

    def dashes(self, text: str) -> bool:
        """Take the spans from a dashes line; whether `text` was one."""
        if not _DASHES.match(text):
            return False
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", text)]
        # The last column runs to the end of the line (a long value may overflow it).
        self.spans = [*spans[:-1], (spans[-1][0], None)] if spans else None
        return True

    def split(self, text: str) -> list[str]:
        if "|" in text:
            cells = text.split("|")
            if len(cells) > 1 and cells[-1] == "":
                cells.pop()
            return [c.strip() for c in cells]
        if self.spans:
            # A column's value is right- or left-aligned inside its dashes; fixed-width
            # output cuts long values with a `+`, kept as read.
            return [text[a:b].strip() if b is not None else text[a:].strip() for a, b in self.spans]
        return text.split()


def infer_columns(cells: list[str]) -> list[str] | None:
    """Column names for a header-less row from what its cells look like, or None when the
    first cell is not a job id. Unrecognised cells get no name (empty string)."""
    if not cells or job_ref(cells[0]) is None:
        return None
    names = [""] * len(cells)
    names[0] = "jobid"
    run = _longest_time_run(cells)
    if run is not None:
        start, length = run
        labels = {
            1: ("submit",),
            2: ("start", "end"),
            3: ("submit", "start", "end"),
            4: ("submit", "eligible", "start", "end"),
        }.get(min(length, 4), ())
        for offset, label in enumerate(labels):
            names[start + offset] = label
    for i, cell in enumerate(cells):
        if names[i]:
            continue
        word = cell.split(" ", 1)[0].rstrip("+")
        if "state" not in names and word in _STATE_WORDS:
            names[i] = "state"
        elif "elapsed" not in names and _DURATION.match(cell):
            names[i] = "elapsed"
        elif "=" in cell and any(key in cell for key in _TRES_KEYS):
            if "alloctres" not in names and ("gres/gpu" in cell or "reqtres" in names):
                names[i] = "alloctres"
            elif "reqtres" not in names and "alloctres" not in names:
                names[i] = "reqtres"
    return names


def _longest_time_run(cells: list[str]) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    i = 0
    while i < len(cells):
        j = i
        while j < len(cells) and (_ISO.match(cells[j]) or cells[j] in _NO_TIME):
            j += 1
        found = j > i and any(_ISO.match(c) for c in cells[i:j])
        if found and (best is None or j - i > best[1]):
            best = (i, j - i)
        i = max(j, i + 1)
    return best
