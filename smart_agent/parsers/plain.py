"""Plain-text logs: each line searched for cue rules; the time from the line when it has one."""

from __future__ import annotations

from datetime import tzinfo

from predictors.types import Event, EventKind
from smart_agent.parsers.base import BaseParser
from smart_agent.parsers.cues import CueHit, CueMatcher
from smart_agent.parsers.times import find_time, parse_time
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
        self._ended: set[str] = set()  # jobs whose end was reported (a job and its step)

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        if not line or line.isspace():
            return []
        hit = self.matcher.match(line)
        if hit is None:
            return None
        if hit.rule.kind == EventKind.JOB_FINISHED and hit.job_id:
            if hit.job_id in self._ended:
                return []
            if len(self._ended) > 10_000:
                self._ended.clear()
            self._ended.add(hit.job_id)
        stated = parse_time(hit.at, now, self.tz) if hit.at else None
        at = stated or find_time(line, now, self.tz) or now
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
