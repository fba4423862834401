"""The Slurm source: where `sacct` (or `squeue`) can be run, poll it with a fixed,
machine-readable format instead of relying on a file someone saves."""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from datetime import tzinfo

from pydantic import BaseModel, ConfigDict, Field

from predictors.types import Event
from smart_agent.parsers.base import BaseParser
from smart_agent.parsers.slurm import FINISHED, SacctParser, phase_of
from smart_agent.parsers.slurm_table import job_ref
from smart_agent.parsers.squeue import SqueueParser, job_id_of
from smart_agent.redact import Redactor

log = logging.getLogger(__name__)

SACCT_FORMAT = (
    "JobIDRaw,JobID,User,JobName,Partition,State,Submit,Start,End,ElapsedRaw,AllocTRES,ReqTRES"
)
# `-O JobID` is the raw id: an array task would be `7` here and `3_1` in sacct, and a
# pending array `3_[0-3]` would be `3`, a job that seems to end when its tasks start. The
# array and het columns spell the id as sacct does (see squeue.job_id_of).
SQUEUE_FORMAT = (
    "ArrayJobID:|,ArrayTaskID:|,HetJobID:|,HetJobOffset:|,JobID:|,UserName:|,State:|,"
    "TimeUsed:|,NumNodes:|,tres-per-node:|,tres-per-job:|,SubmitTime:|,StartTime:|,Name:"
)
# The headers squeue prints for the leading columns of SQUEUE_FORMAT.
SQUEUE_ID_COLUMNS = ["ARRAY_JOB_ID", "ARRAY_TASK_ID", "HET_JOB_ID", "HET_JOB_OFFSET", "JOBID"]
Runner = Callable[[Sequence[str], float], str]
# Where the job id and the state are in each mode's fixed format.
ID_STATE_COLUMNS = {"sacct": (1, 5), "squeue": (4, 6)}
SOURCE = "slurm"


class SlurmConfig(BaseModel):
    """`slurm:` in the agent's YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    poll: str = Field(
        default="auto",
        pattern=r"^(auto|on|off)$",
        description="auto: poll when sacct or squeue is on PATH; on; off.",
    )
    interval_s: float = Field(default=30.0, ge=5, le=3600)
    lookback: str = Field(
        default="now-1days", pattern=r"^[A-Za-z0-9:+-]{1,40}$", description="sacct -S value."
    )

    def wanted(self) -> bool:
        if self.poll == "auto":
            return available("sacct") or available("squeue")
        return self.poll == "on"


def run_command(argv: Sequence[str], timeout: float) -> str:
    """stdout of a command; raises on a non-zero exit (sacct without accounting, say)."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def alive_jobs(text: str, mode: str) -> list[str]:
    """Jobs (steps and het components folded) that a poll's output lists as not finished."""
    id_col, state_col = ID_STATE_COLUMNS[mode]
    alive: set[str] = set()
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) <= state_col:
            continue
        if mode == "squeue":
            width = len(SQUEUE_ID_COLUMNS)
            ref = job_ref(job_id_of(SQUEUE_ID_COLUMNS, [c.strip() for c in cells[:width]]))
        else:
            ref = job_ref(cells[id_col])
        phase = phase_of(cells[state_col])
        if ref is None or ref.step or ref.pending_array or phase is None:
            continue
        if phase < FINISHED:
            alive.add(ref.job)
    return sorted(alive)


def available(command: str) -> bool:
    return shutil.which(command) is not None


class SlurmSource:
    """Every `interval_s`, `sacct -X -P` over the last `lookback` (the user's own jobs), or
    `squeue --me -O ...` when sacct fails; the output goes through the same parser as a
    saved file: the first poll is a baseline, later polls report what changed."""

    def __init__(
        self,
        on_event: Callable[[Event], None],
        *,
        user: str,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        interval_s: float = 30.0,
        lookback: str = "now-1days",
        timeout_s: float = 20.0,
        run: Runner = run_command,
        clock: Callable[[], float] = time.time,
        give_up_after: int | None = None,
        on_alive: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.on_event = on_event
        # After each poll: the jobs it lists as pending or running (their leases are renewed).
        self.on_alive = on_alive
        self.user = user
        self.redactor = redactor if redactor is not None else Redactor()
        self.tz = tz
        self.interval_s = interval_s
        self.lookback = lookback
        self.timeout_s = timeout_s
        self.run = run
        self.clock = clock
        self.mode: str | None = None  # sacct or squeue, once one has answered
        self.parser: BaseParser | None = None
        self.polls = 0
        self.errors = 0
        self.failed_in_a_row = 0
        # `poll: auto` on a machine with the commands but no cluster to ask: stop trying.
        self.give_up_after = give_up_after
        self.events = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sacct(self) -> list[str]:
        return ["sacct", "-X", "-P", "-S", self.lookback, f"--format={SACCT_FORMAT}"]

    def _squeue(self) -> list[str]:
        return ["squeue", "--me", "-O", SQUEUE_FORMAT]

    def poll_once(self) -> list[Event]:
        """One run of the command; the events it gives (also passed to `on_event`)."""
        now = self.clock()
        text = None
        for mode, argv in (("sacct", self._sacct()), ("squeue", self._squeue())):
            if self.mode not in (None, mode):
                continue
            try:
                text = self.run(argv, self.timeout_s)
            except Exception as exc:  # not installed, no accounting, a timeout
                log.debug("slurm source: %s failed: %s", mode, exc)
                continue
            if self.mode is None:
                self.mode = mode
                self.parser = self._parser(mode)
                # Which one answered: squeue means no accounting (no history before now).
                log.info("slurm source: polling %s", mode)
            break
        if text is None or self.parser is None:
            self.errors += 1
            self.failed_in_a_row += 1
            return []
        self.failed_in_a_row = 0
        self.polls += 1
        events: list[Event] = []
        for line in text.splitlines():
            events += self.parser.parse(line, source=SOURCE, now=now)
        if isinstance(self.parser, SqueueParser):
            # One run is one whole snapshot: the jobs it no longer lists have ended now.
            events += self.parser.end_snapshot(source=SOURCE, now=now)
        events += self.parser.caught_up(source=SOURCE, now=now)  # the first poll: a baseline
        for event in events:
            self.events += 1
            self.on_event(event)
        if self.on_alive is not None and self.mode is not None:
            self.on_alive(alive_jobs(text, self.mode))
        return events

    def _parser(self, mode: str) -> BaseParser:
        options = {"redactor": self.redactor, "tz": self.tz, "baseline": True}
        if mode == "sacct":
            return SacctParser(self.user, **options)  # type: ignore[arg-type]
        return SqueueParser(self.user, **options)  # type: ignore[arg-type]

    # -- thread --------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="jitgpu-slurm", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                self.errors += 1
                log.exception("slurm poll failed")
            if self.give_up_after is not None and self.failed_in_a_row >= self.give_up_after:
                log.info("slurm source off: neither sacct nor squeue answered")
                return
            self._stop.wait(self.interval_s)
