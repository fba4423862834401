"""Plain-text logs: each line searched for cue rules; the time from the line when it has one."""

from __future__ import annotations

from datetime import tzinfo

from predictors.types import Event
from smart_agent.parsers.base import BaseParser
from smart_agent.parsers.cues import CueHit, CueMatcher
from smart_agent.parsers.times import find_time
from smart_agent.redact import Redactor


class PlainParser(BaseParser):
    """A line matching a cue rule becomes one event (the first rule that matches); other
    lines are counted as unknown. Blank lines are ignored."""

    name = "plain"

    def __init__(
        self,
        user: str,
        *,
        matcher: CueMatcher | None = None,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.matcher = matcher if matcher is not None else CueMatcher()

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        if not line or line.isspace():
            return []
        hit = self.matcher.match(line)
        if hit is None:
            return None
        at = find_time(line, now, self.tz) or now
        return [self.from_hit(hit, at, line, source)]

    def from_hit(self, hit: CueHit, at: float, text: str, source: str) -> Event:
        return self.event(
            hit.rule.kind,
            at,
            source=source,
            text=text,
            cue=hit.name,
            gpus=hit.gpus,
            job_id=hit.job_id,
            gpu_model=hit.gpu_model,
        )
