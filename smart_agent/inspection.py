"""What the agent makes of a file, without a server: its kind, the job events and cues it
would send on, each with its source line, and the redacted text an LLM would see."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from predictors.types import Event
from smart_agent.parsers.auto import AutoParser, make_parser
from smart_agent.parsers.base import Parser
from smart_agent.redact import PrivateKeyGuard, Redactor
from smart_agent.watch.snapshot import is_job_table
from smart_agent.watch.tailer import REWOUND, FileTailer

STRUCTURED = frozenset({"sacct", "squeue", "jobs_csv", "jsonl", "shell_history"})


@dataclass
class Inspection:
    """One file as the agent reads it."""

    path: str
    kind: str  # the parser that read it: sacct, squeue, jsonl, plain, shell_history ...
    layout: str | None  # for sacct: pipe (-P), pipe (-p), fixed-width, inferred, configured
    lines: int
    unknown: int
    events: list[tuple[int, Event]] = field(default_factory=list)  # (source line, event)
    notes: list[str] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # sacct: each job's last row
    redacted: list[str] = field(default_factory=list)  # the lines an LLM prompt may quote

    @property
    def recognized(self) -> bool:
        """A structured format was recognised, or a line was understood as a cue or job
        event (a plain log none of whose lines means anything to the agent is not)."""
        return self.kind in STRUCTURED or bool(self.events)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "layout": self.layout,
            "recognized": self.recognized,
            "lines": self.lines,
            "unknown_lines": self.unknown,
            "notes": list(self.notes),
            "events": [event_dict(e, line) for line, e in self.events],
            "jobs": [{"job_id": job, **_times_iso(row)} for job, row in self.jobs.items()],
            "redacted": list(self.redacted),
        }


def _times_iso(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in ("submit", "start", "end"):
        if isinstance(out.get(key), float):
            out[key] = datetime.fromtimestamp(out[key], UTC).isoformat(timespec="seconds")
    return out


def event_dict(event: Event, line: int | None = None) -> dict[str, Any]:
    """An event as a stable JSON object (times as ISO 8601 in UTC)."""
    return {
        "kind": event.kind.value,
        "job_id": event.job_id,
        "user": event.user,
        "gpus": event.gpus,
        "gpu_model": event.gpu_model,
        "at": datetime.fromtimestamp(event.at, UTC).isoformat(timespec="seconds"),
        "duration_s": event.duration_s,
        "cue": event.cue,
        "excerpt": event.excerpt,
        "line": line,
    }


def inspect_file(
    path: str | Path,
    *,
    user: str,
    kind: str = "auto",
    now: float | None = None,
    tz: tzinfo | None = None,
    sacct_fields: Sequence[str] | None = None,
    redactor: Redactor | None = None,
    max_redacted: int = 50,
) -> Inspection:
    """Read `path` the way the agent's watcher does (its tailer, from the start, the last
    line read even without a newline) through the parser the agent would choose."""
    path = Path(path)
    now = time.time() if now is None else now
    redactor = redactor if redactor is not None else Redactor()
    table = is_job_table(path, kind, sacct_fields=bool(sacct_fields))
    parser: Parser = make_parser(
        kind,
        path,
        user=user,
        redactor=redactor,
        tz=tz,
        sacct_fields=sacct_fields,
        baseline=table,
    )
    guard = PrivateKeyGuard()
    label = path.name
    result = Inspection(str(path), "", None, 0, 0)
    counter = [0]

    def on_line(_: Path, text: str) -> None:
        counter[0] += 1
        line = guard.feed(text)
        for event in parser.parse(line, source=label, now=now):
            result.events.append((counter[0], event))
        if len(result.redacted) < max_redacted:
            result.redacted.append(redactor.excerpt(line) or "")

    def on_notice(_: Path, what: str) -> None:
        if what == REWOUND:
            parser.rewound(source=label, now=now)

    tailer = FileTailer(path, on_line, from_end=False, on_notice=on_notice)
    tailer.poll()
    while tailer.more:
        tailer.poll()
    tailer.flush_partial()  # the file is not being written: its last line is complete
    tailer.close()
    # Caught up once the whole file, its last line included, has been read.
    result.events.extend((counter[0], e) for e in parser.caught_up(source=label, now=now))
    chosen = parser.chosen if isinstance(parser, AutoParser) else parser
    result.kind = parser.kind if isinstance(parser, AutoParser) else parser.name
    result.layout = getattr(chosen, "layout_name", None)
    result.notes = list(getattr(chosen, "notes", []))
    result.jobs = dict(getattr(chosen, "records", {}))
    result.lines = parser.stats.lines
    result.unknown = parser.stats.unknown
    return result
