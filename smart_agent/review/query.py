"""Reading the prediction log for review: a read-only connection, filters, typed rows."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import quote

from predictors.types import Cost, Forecast
from smart_agent.predlog import HOLD_OUTCOMES, SCHEMA_VERSION

DEFAULT_LOG = "~/.local/share/jitgpu/predictions.db"
LOG_ENV = "JITGPU_PREDICTION_LOG"
DECISIONS = ("shadow", "accepted", "rejected", "refused")
# "none": rows that never became a hold (shadow and rejected forecasts).
OUTCOMES = (*HOLD_OUTCOMES, "none")
RESOLVED = tuple(o for o in HOLD_OUTCOMES if o not in ("pending", "refused"))
Zone = tzinfo | None
"""The time zone days, weeks and naive times are read in; None is the machine's local time
(with its daylight-saving rules, which a fixed offset would get wrong across a season)."""
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ReviewError(Exception):
    """A problem the command line reports in one line (missing log, bad filter, unknown id)."""


class FilterError(ReviewError):
    def __init__(self, option: str, value: str, allowed: str) -> None:
        super().__init__(f"{option} {value!r}: allowed values are {allowed}")
        self.option = option


def default_log_path() -> Path:
    return Path(os.environ.get(LOG_ENV) or DEFAULT_LOG).expanduser()


def open_log(path: str | Path) -> sqlite3.Connection:
    """A read-only connection: reviewing never changes the log the agent is writing."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ReviewError(f"prediction log not found: {p}")
    db = sqlite3.connect(f"file:{quote(str(p.resolve()))}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        found = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        db.execute("SELECT 1 FROM forecasts, jobs, llm_calls, cycles LIMIT 0").fetchall()
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ReviewError(f"{p}: not a prediction log ({exc})") from None
    if found is not None and int(found[0]) > SCHEMA_VERSION:
        db.close()
        raise ReviewError(
            f"{p}: prediction log schema {found[0]} is newer than this jitgpu "
            f"understands ({SCHEMA_VERSION}); upgrade jitgpu"
        )
    return db


def parse_when(text: str, *, option: str, now: float, tz: Zone) -> float:
    """An ISO date or date-time (naive ones in `tz`), or an age before `now` like 12h or 7d."""
    age = _AGE.match(text)
    if age:
        return now - float(age.group(1)) * _UNITS[age.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(
            option,
            text,
            "an ISO date or time (2026-03-02, 2026-03-02T14:00) or an age (30m, 12h, 7d, 2w)",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return when.timestamp()


def _choices(option: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    for value in values:
        if value not in allowed:
            raise FilterError(option, value, ", ".join(allowed))
    return tuple(values)


@dataclass(frozen=True, slots=True)
class Filters:
    """What to review: forecasts made in [since, until) and jobs that arrived then."""

    since: float | None = None
    until: float | None = None
    predictors: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    cues: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls,
        *,
        now: float,
        tz: Zone,
        since: str | None = None,
        until: str | None = None,
        predictors: Sequence[str] = (),
        outcomes: Sequence[str] = (),
        cues: Sequence[str] = (),
        decisions: Sequence[str] = (),
    ) -> Filters:
        """Filters from command-line text; a bad value raises FilterError naming the option."""
        start = None if since is None else parse_when(since, option="--since", now=now, tz=tz)
        end = None if until is None else parse_when(until, option="--until", now=now, tz=tz)
        if start is not None and end is not None and end <= start:
            raise ReviewError(f"--until {until!r} is not after --since {since!r}")
        return cls(
            since=start,
            until=end,
            predictors=tuple(predictors),
            outcomes=_choices("--outcome", outcomes, OUTCOMES),
            cues=tuple(cues),
            decisions=_choices("--decision", decisions, DECISIONS),
        )

    def time_sql(self, column: str) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if self.since is not None:
            where.append(f"{column} >= ?")
            params.append(self.since)
        if self.until is not None:
            where.append(f"{column} < ?")
            params.append(self.until)
        return where, params

    def forecast_sql(self) -> tuple[str, list[Any]]:
        where, params = self.time_sql("made_at")
        for column, values in (
            ("predictor", self.predictors),
            ("cue", self.cues),
            ("decision", self.decisions),
        ):
            if values:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                params.extend(values)
        if self.outcomes:
            named = [o for o in self.outcomes if o != "none"]
            parts = [f"outcome IN ({', '.join('?' * len(named))})"] if named else []
            if "none" in self.outcomes:
                parts.append("outcome IS NULL")
            where.append(f"({' OR '.join(parts)})")
            params.extend(named)
        return (" WHERE " + " AND ".join(where)) if where else "", params


def _rows(db: sqlite3.Connection, cls: type, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """`sql` (with `{cols}` for the column list) read into `cls`, the dataclass naming the
    columns review reads; columns a newer writer may add are not selected."""
    cols = ", ".join(f.name for f in fields(cls))
    cursor = db.cursor()
    cursor.row_factory = None  # plain tuples: twice as fast as sqlite3.Row on big logs
    return [cls(*r) for r in cursor.execute(sql.format(cols=cols), params)]


@dataclass(frozen=True, slots=True)
class ForecastRow:
    id: int
    cycle_id: int | None
    made_at: float
    user: str
    predictor: str
    start_at: float
    end_at: float
    gpu_count: int
    gpu_model: str | None
    confidence: float
    expected_duration_s: float | None
    rationale: str | None
    prompt_version: str | None
    prompt_tokens: int
    completion_tokens: int
    usd: float
    cue: str | None
    decision: str
    reason: str | None
    hold_id: str | None
    hold_gpus: int | None
    outcome: str | None
    outcome_at: float | None
    claimed_at: float | None
    lead_s: float | None
    idle_gpu_minutes: float | None
    job_id: int | None

    @property
    def shadow(self) -> bool:
        return self.decision == "shadow"

    @property
    def cost(self) -> Cost:
        return Cost(self.prompt_tokens or 0, self.completion_tokens or 0, self.usd or 0.0)

    def forecast(self, *, gpus: int | None = None) -> Forecast | None:
        """The row as a forecast for scoring, its window starting no earlier than it was made
        (as the policy places holds); None for a row no forecast could have produced."""
        try:
            return Forecast(
                start_at=max(self.start_at, self.made_at),
                end_at=max(self.end_at, self.made_at),
                gpu_count=gpus or self.gpu_count,
                confidence=min(1.0, max(0.0, self.confidence)),
                predictor=self.predictor,
                gpu_model=self.gpu_model,
                cost=self.cost,
                user=self.user,
            )
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    at: float
    user: str
    gpus: int | None
    gpu_model: str | None
    source: str | None
    job_ref: str | None
    hold_id: str | None
    allocation_id: str | None
    time_to_gpu_s: float | None
    warm: int
    ended_at: float | None


@dataclass(frozen=True, slots=True)
class LlmCallRow:
    id: int
    at: float
    status: str
    model: str | None
    prompt_version: str | None
    prompt_tokens: int
    completion_tokens: int
    usd: float
    latency_s: float | None
    detail: str | None


@dataclass(slots=True)
class Selection:
    """The rows under review, oldest first."""

    forecasts: list[ForecastRow] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)
    llm_calls: list[LlmCallRow] = field(default_factory=list)


def load(db: sqlite3.Connection, filters: Filters) -> Selection:
    """Forecasts passing every filter; jobs and LLM calls in the time range only."""
    where, params = filters.forecast_sql()
    time_where, time_params = filters.time_sql("at")
    clause = (" WHERE " + " AND ".join(time_where)) if time_where else ""
    by_time = (f"{clause} ORDER BY at, id", time_params)
    return Selection(
        _rows(
            db, ForecastRow, f"SELECT {{cols}} FROM forecasts{where} ORDER BY made_at, id", params
        ),
        _rows(db, JobRow, "SELECT {cols} FROM jobs" + by_time[0], by_time[1]),
        _rows(db, LlmCallRow, "SELECT {cols} FROM llm_calls" + by_time[0], by_time[1]),
    )


def newest(db: sqlite3.Connection, filters: Filters, limit: int) -> list[ForecastRow]:
    where, params = filters.forecast_sql()
    sql = f"SELECT {{cols}} FROM forecasts{where} ORDER BY made_at DESC, id DESC LIMIT ?"
    return _rows(db, ForecastRow, sql, [*params, limit])


def detail(db: sqlite3.Connection, forecast_id: int) -> dict[str, Any]:
    """One forecast with its cycle (trigger, cue, the redacted context), job and siblings."""
    found = _rows(db, ForecastRow, "SELECT {cols} FROM forecasts WHERE id=?", (forecast_id,))
    if not found:
        raise ReviewError(f"no forecast with id {forecast_id} in the prediction log")
    row: ForecastRow = found[0]
    out: dict[str, Any] = {"forecast": row, "cycle": None, "job": None, "siblings": []}
    if row.cycle_id is not None:
        cycle = db.execute("SELECT * FROM cycles WHERE id=?", (row.cycle_id,)).fetchone()
        if cycle is not None:
            out["cycle"] = {
                "id": cycle["id"],
                "at": cycle["at"],
                "trigger": cycle["trigger"],
                "cue": cycle["cue"],
                "context": _json_or_text(cycle["context"]),
            }
        out["siblings"] = [
            {"id": r["id"], "predictor": r["predictor"], "decision": r["decision"]}
            for r in db.execute(
                "SELECT id, predictor, decision FROM forecasts WHERE cycle_id=? AND id<>? "
                "ORDER BY id",
                (row.cycle_id, row.id),
            )
        ]
    jobs: list[JobRow] = []
    if row.job_id is not None:
        jobs = _rows(db, JobRow, "SELECT {cols} FROM jobs WHERE id=?", (row.job_id,))
    if not jobs and row.hold_id is not None:
        sql = "SELECT {cols} FROM jobs WHERE hold_id=? ORDER BY id LIMIT 1"
        jobs = _rows(db, JobRow, sql, (row.hold_id,))
    out["job"] = jobs[0] if jobs else None
    return out


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def iso(at: float | None, tz: Zone) -> str | None:
    """A log time as ISO 8601 in `tz`, to the second."""
    if at is None:
        return None
    return datetime.fromtimestamp(at, tz).astimezone(tz).isoformat(timespec="seconds")


def week_of(at: float, tz: Zone) -> str:
    year, week, _ = datetime.fromtimestamp(at, tz).isocalendar()
    return f"{year}-W{week:02d}"


def day_of(at: float, tz: Zone) -> str:
    return datetime.fromtimestamp(at, tz).date().isoformat()


def days_between(first: float, last: float, tz: Zone) -> list[str]:
    """Every calendar day in `tz` from the one holding `first` to the one holding `last`."""
    day = datetime.fromtimestamp(first, tz).date()
    end = datetime.fromtimestamp(last, tz).date()
    out = []
    while day <= end:
        out.append(day.isoformat())
        day += timedelta(days=1)
    return out
