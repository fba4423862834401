"""Parser choice: by file name, else by the first lines (Slurm and CSV headers), and JSON
objects and plain text mixed line by line in ordinary logs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import tzinfo
from pathlib import Path, PurePath

from predictors.types import Event
from smart_agent.parsers.base import BaseParser, Parser
from smart_agent.parsers.cues import CueMatcher
from smart_agent.parsers.jobs_csv import JobsCsvParser
from smart_agent.parsers.jsonl import JsonlParser
from smart_agent.parsers.plain import PlainParser
from smart_agent.parsers.shell import ShellHistoryParser
from smart_agent.parsers.slurm import SacctParser
from smart_agent.parsers.slurm_table import infer_columns
from smart_agent.parsers.squeue import SqueueParser
from smart_agent.redact import Redactor

PARSER_NAMES = ("auto", "plain", "jsonl", "sacct", "squeue", "shell_history", "jobs_csv")
HISTORY_NAMES = frozenset(
    {".bash_history", ".zsh_history", ".history", ".sh_history", "fish_history", ".histfile"}
)


def kind_for_path(path: str | PurePath) -> str | None:
    """The parser a file's name implies, or None (decide from its content)."""
    name = PurePath(path).name.lower()
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".csv"):
        return "jobs_csv"
    if name in HISTORY_NAMES or name.endswith("_history"):
        return "shell_history"
    if name.startswith("sacct"):
        return "sacct"
    if name.startswith("squeue"):
        return "squeue"
    return None


def sniff_kind(line: str, *, sacct_fields: bool = False) -> str | None:
    """`sacct` or `squeue` when a first line is one of their headers (or a header-less
    sacct row), else None. sacct spells its header `JobID`, squeue `JOBID`: the content
    decides, whatever the file is called."""
    head = line.strip()
    cells = [c.strip() for c in (head.split("|") if "|" in head else head.split())]
    if cells and cells[0] in ("JobID", "JobIDRaw"):
        return "sacct"
    words = {c.upper() for c in cells}
    if {"JOBID", "ARRAY_JOB_ID"} & words and ("ST" in words or "STATE" in words):
        return "squeue"
    if "|" in head and (sacct_fields or _sacct_row(cells)):
        return "sacct"
    return None


class AutoParser(BaseParser):
    """Until a header says otherwise, lines that look like JSON objects go to the JSON-lines
    parser and the rest (or JSON it cannot read) to the plain-text parser. A first line that
    is an sacct, squeue or jobs-CSV header switches the stream to that parser for good."""

    name = "auto"

    def __init__(
        self,
        user: str,
        *,
        matcher: CueMatcher | None = None,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        sacct_fields: Sequence[str] | None = None,
        baseline: bool = False,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.plain = PlainParser(user, matcher=matcher, redactor=self.redactor, tz=tz)
        self.jsonl = JsonlParser(user, matcher=self.plain.matcher, redactor=self.redactor, tz=tz)
        self.chosen: BaseParser | None = None
        self._decided = False
        self.sacct_fields = sacct_fields
        self.baseline = baseline

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        if self.chosen is not None:
            return self.chosen._parse(line, source, now)
        if not self._decided and line.strip():
            self._decided = True
            self.chosen = self._sniff(line)
            if self.chosen is not None:
                return self.chosen._parse(line, source, now)
        if line.lstrip().startswith("{"):
            events = self.jsonl._parse(line, source, now)
            if events is not None:
                return events
        return self.plain._parse(line, source, now)

    def _sniff(self, line: str) -> BaseParser | None:
        lower = line.strip().lower()
        options = {"redactor": self.redactor, "tz": self.tz}
        kind = sniff_kind(line, sacct_fields=bool(self.sacct_fields))
        if kind == "sacct":
            return SacctParser(
                self.user, fields=self.sacct_fields, baseline=self.baseline, **options
            )
        if kind == "squeue":
            return SqueueParser(self.user, baseline=self.baseline, **options)
        if lower.startswith("job_id,") and "submit_time_s" in lower:
            return JobsCsvParser(self.user, **options)
        return None

    @property
    def kind(self) -> str:
        """What the stream was recognised as so far."""
        return self.chosen.name if self.chosen is not None else "plain"

    def rewound(self, *, source: str, now: float) -> None:
        if self.chosen is not None:
            self.chosen.rewound(source=source, now=now)

    def caught_up(self, *, source: str, now: float) -> list[Event]:
        if self.chosen is None:
            return []
        events = self.chosen.caught_up(source=source, now=now)
        self.stats.events += len(events)
        return events


def make_parser(
    kind: str,
    path: str | PurePath,
    *,
    user: str,
    matcher: CueMatcher | None = None,
    redactor: Redactor | None = None,
    tz: tzinfo | None = None,
    launch_patterns: Sequence[str] = (),
    since: float | None = None,
    t0: float = 0.0,
    sacct_fields: Sequence[str] | None = None,
    baseline: bool = False,
    script_base: Path | None = None,
) -> Parser:
    """A new parser (one per file) for `kind`; `auto` looks at the file name first.
    `since`: shell-history entries older than this are not reported; `t0`: epoch seconds
    of a jobs CSV's time 0; `sacct_fields`: columns of header-less sacct rows; `baseline`:
    the first read of a job table is what was there before (see SacctParser)."""
    if kind == "auto":
        kind = kind_for_path(path) or "auto"
    redactor = redactor if redactor is not None else Redactor()
    if kind == "auto":
        return AutoParser(
            user,
            matcher=matcher,
            redactor=redactor,
            tz=tz,
            sacct_fields=sacct_fields,
            baseline=baseline,
        )
    if kind == "plain":
        return PlainParser(user, matcher=matcher, redactor=redactor, tz=tz)
    if kind == "jsonl":
        return JsonlParser(user, matcher=matcher, redactor=redactor, tz=tz)
    if kind == "sacct":
        return SacctParser(user, redactor=redactor, tz=tz, fields=sacct_fields, baseline=baseline)
    if kind == "squeue":
        return SqueueParser(user, redactor=redactor, tz=tz, baseline=baseline)
    if kind == "shell_history":
        return ShellHistoryParser(
            user,
            patterns=launch_patterns,
            redactor=redactor,
            tz=tz,
            since=since,
            script_base=script_base,
        )
    if kind == "jobs_csv":
        return JobsCsvParser(user, redactor=redactor, tz=tz, t0=t0)
    raise ValueError(f"unknown parser {kind!r}; allowed: {', '.join(PARSER_NAMES)}")


def _sacct_row(cells: list[str]) -> bool:
    """A header-less sacct row: a job id first, and a Slurm state, a time or TRES among
    its cells."""
    names = infer_columns(cells)
    return names is not None and bool({"state", "submit", "end", "alloctres"} & set(names))
