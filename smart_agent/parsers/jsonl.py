"""JSON-lines logs: a time and a message field (cue rules apply to the message), or a
structured cue field naming a known cue, with optional GPU count and job id."""

from __future__ import annotations

import json
from datetime import tzinfo
from typing import Any

from predictors.types import Cue, Event, EventKind
from smart_agent.parsers.base import to_int
from smart_agent.parsers.cues import CueMatcher
from smart_agent.parsers.plain import PlainParser
from smart_agent.parsers.times import parse_time
from smart_agent.redact import Redactor

TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "asctime", "created", "datetime", "date")
MESSAGE_KEYS = ("message", "msg", "log", "text")
CUE_KEYS = ("cue", "event", "stage", "type", "status")
GPU_KEYS = ("gpus", "num_gpus", "n_gpus", "gpu_count", "world_size", "nproc_per_node")
JOB_KEYS = ("job_id", "jobid", "slurm_job_id", "run_id")
KNOWN_CUES = frozenset(c.value for c in Cue)


def _first(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = record.get(key)
        if value is not None and value != "":
            return value
    return None


def summary(record: dict[str, Any], limit: int = 2000) -> str:
    """The record as `key=value` pairs (values as JSON, decoded from the line's escapes, so
    redaction sees the characters themselves), cut near `limit` characters."""
    parts: list[str] = []
    size = 0
    for key, value in record.items():
        part = f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
        parts.append(part)
        size += len(part) + 1
        if size > limit:
            break
    return " ".join(parts)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return str(value)


class JsonlParser(PlainParser):
    """One JSON object per line. A line that is not a JSON object is unknown; an object
    with neither a known cue field nor a message matching a rule is understood but quiet."""

    name = "jsonl"

    def __init__(
        self,
        user: str,
        *,
        matcher: CueMatcher | None = None,
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        super().__init__(user, matcher=matcher, redactor=redactor, tz=tz)
        self.cue_names = KNOWN_CUES | self.matcher.names

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        text = line.strip()
        if not text:
            return []
        if not text.startswith("{"):
            return None
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        return self.from_record(record, line, source, now)

    def from_record(
        self, record: dict[str, Any], line: str, source: str, now: float
    ) -> list[Event]:
        at = parse_time(_first(record, TIME_KEYS), now, self.tz) or now
        message = _text(_first(record, MESSAGE_KEYS))
        gpus = to_int(_first(record, GPU_KEYS))
        job_id = _text(_first(record, JOB_KEYS))
        for key in CUE_KEYS:
            value = record.get(key)
            if isinstance(value, str) and value.strip().lower() in self.cue_names:
                cue = value.strip().lower()
                return [
                    self.event(
                        EventKind.CUE,
                        at,
                        source=source,
                        text=message or summary(record),
                        cue=cue,
                        gpus=gpus,
                        job_id=job_id,
                    )
                ]
        if message is None:
            return []
        hit = self.matcher.match(message)
        if hit is None:
            return []
        event = self.from_hit(hit, at, message, source)
        if event.gpus is None and gpus is not None:
            event = self.event(
                hit.rule.kind,
                at,
                source=source,
                text=message,
                cue=hit.name,
                gpus=gpus,
                job_id=hit.job_id or job_id,
                gpu_model=hit.gpu_model,
            )
        return [event]
