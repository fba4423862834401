"""What every parser shares: the protocol, counters, and events built already redacted."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import tzinfo
from typing import Protocol, runtime_checkable

from predictors.types import Event, EventKind
from smart_agent.redact import Redactor

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ParserStats:
    """Lines seen; events made; lines not understood (`unknown`); lines that hit a bug
    (`errors`, caught: a parser never raises)."""

    lines: int = 0
    events: int = 0
    unknown: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@runtime_checkable
class Parser(Protocol):
    """Turns lines of one stream (one file) into events; keeps per-stream state.

    `parse` never raises, on any input. `rewound` is called when the file was truncated or
    replaced (its next lines start from its beginning again); `caught_up` when the reader
    reached the end of what was written so far.
    """

    name: str
    stats: ParserStats

    def parse(self, line: str, *, source: str, now: float) -> list[Event]: ...

    def rewound(self, *, source: str, now: float) -> None: ...

    def caught_up(self, *, source: str, now: float) -> list[Event]: ...


class BaseParser:
    """Counting and the never-raise guard around `_parse`; `event()` redacts as it builds."""

    name = "base"

    def __init__(
        self, user: str, *, redactor: Redactor | None = None, tz: tzinfo | None = None
    ) -> None:
        self.user = user
        self.redactor = redactor if redactor is not None else Redactor()
        self.tz = tz  # time zone of times written without one; None: local time
        self.stats = ParserStats()

    def parse(self, line: str, *, source: str, now: float) -> list[Event]:
        stats = self.stats
        stats.lines += 1
        try:
            events = self._parse(line, source, now)
        except Exception:  # a parser bug must not stop the agent; the line is counted
            stats.errors += 1
            log.debug("%s parser failed on a line of %s", self.name, source, exc_info=True)
            return []
        if events is None:
            stats.unknown += 1
            return []
        stats.events += len(events)
        return events

    def rewound(self, *, source: str, now: float) -> None:
        return None

    def caught_up(self, *, source: str, now: float) -> list[Event]:
        return []

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        """Events for `line`; [] for a line understood that says nothing; None: unknown."""
        raise NotImplementedError

    def event(
        self,
        kind: EventKind,
        at: float,
        *,
        source: str,
        text: str | None = None,
        user: str | None = None,
        cue: str | None = None,
        gpus: int | None = None,
        gpu_model: str | None = None,
        duration_s: float | None = None,
        job_id: str | None = None,
    ) -> Event:
        """An event whose text fields are all redacted; a user from a record (not the
        agent's own) is redacted too."""
        redactor = self.redactor
        own = user is None or user == self.user
        return Event(
            kind=kind,
            at=at,
            user=self.user if own else (redactor.field(user, 64) or self.user),
            gpus=gpus if gpus is None or 0 <= gpus <= 1_000_000 else None,
            gpu_model=redactor.field(gpu_model, 64),
            duration_s=duration_s if duration_s is None or duration_s >= 0 else None,
            job_id=redactor.field(job_id),
            cue=redactor.field(cue, 64),
            excerpt=None if text is None else (redactor.excerpt(text) or None),
            source=redactor.field(source, 256),
        )


def to_int(text: object) -> int | None:
    """A non-negative integer from a field, or None (never raises on long digit strings)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 else None
    if isinstance(text, float):
        return int(text) if text >= 0 and text.is_integer() and text < 1e12 else None
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text.isdigit() or not text.isascii() or len(text) > 12:
        return None
    return int(text)
