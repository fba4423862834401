"""The prediction log: an SQLite file on the user's machine with every forecast, decision,
hold, outcome, job and LLM call, for review (`jitgpu predictions ...`) and scoring."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from predictors.types import Forecast

SCHEMA_VERSION = 1
# Outcomes of a hold: what became of the GPUs the agent asked for.
HOLD_OUTCOMES = ("pending", "claimed", "expired", "cancelled", "preempted", "failed", "refused")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cycles (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, user TEXT NOT NULL, trigger TEXT NOT NULL,
    cue TEXT, context TEXT
);
CREATE TABLE IF NOT EXISTS forecasts (
    id INTEGER PRIMARY KEY, cycle_id INTEGER REFERENCES cycles(id), made_at REAL NOT NULL,
    user TEXT NOT NULL, predictor TEXT NOT NULL, start_at REAL NOT NULL, end_at REAL NOT NULL,
    gpu_count INTEGER NOT NULL, gpu_model TEXT, confidence REAL NOT NULL,
    expected_duration_s REAL, rationale TEXT, prompt_version TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
    usd REAL NOT NULL DEFAULT 0, cue TEXT,
    decision TEXT NOT NULL, reason TEXT,
    hold_id TEXT, hold_gpus INTEGER, outcome TEXT, outcome_at REAL, claimed_at REAL,
    lead_s REAL, idle_gpu_minutes REAL, job_id INTEGER
);
CREATE INDEX IF NOT EXISTS ix_forecasts_made ON forecasts(made_at);
CREATE INDEX IF NOT EXISTS ix_forecasts_hold ON forecasts(hold_id);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, user TEXT NOT NULL, gpus INTEGER,
    gpu_model TEXT, source TEXT, job_ref TEXT, hold_id TEXT, allocation_id TEXT,
    time_to_gpu_s REAL, warm INTEGER NOT NULL DEFAULT 0, ended_at REAL
);
CREATE INDEX IF NOT EXISTS ix_jobs_at ON jobs(at);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, status TEXT NOT NULL, model TEXT,
    prompt_version TEXT, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, usd REAL NOT NULL DEFAULT 0,
    latency_s REAL, detail TEXT
);
"""


class PredictionLog:
    """Thread-safe writer/reader of the prediction log (WAL; one connection under a lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)
        found = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if found is None:
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif int(found[0]) > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path}: prediction log schema {found[0]} is newer than "
                f"this jitgpu understands ({SCHEMA_VERSION}); upgrade jitgpu"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def agent_id(self) -> str:
        """This log's agent: a random id made once and kept in the meta table. Idempotency
        keys carry it, because the server scopes keys per tenant, not per agent: two agents
        of one team, or a recreated log, would otherwise reuse each other's keys."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('agent_id', ?)",
                (uuid.uuid4().hex,),
            )
            row = db.execute("SELECT value FROM meta WHERE key='agent_id'").fetchone()
        return str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # --- writing ---------------------------------------------------------------------
    def cycle(
        self, *, at: float, user: str, trigger: str, cue: str | None, context: dict[str, Any] | None
    ) -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO cycles(at, user, trigger, cue, context) VALUES (?, ?, ?, ?, ?)",
                (at, user, trigger, cue, json.dumps(context) if context is not None else None),
            )
            return int(cur.lastrowid or 0)

    def forecast(
        self,
        forecast: Forecast,
        *,
        cycle_id: int | None,
        made_at: float,
        user: str,
        decision: str,
        reason: str,
        cue: str | None = None,
    ) -> int:
        f = forecast
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO forecasts(cycle_id, made_at, user, predictor, start_at, end_at, "
                "gpu_count, gpu_model, confidence, expected_duration_s, rationale, "
                "prompt_version, prompt_tokens, completion_tokens, usd, cue, decision, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cycle_id,
                    made_at,
                    user,
                    f.predictor,
                    f.start_at,
                    f.end_at,
                    f.gpu_count,
                    f.gpu_model,
                    f.confidence,
                    f.expected_duration_s,
                    f.rationale[:500],
                    f.prompt_version,
                    f.cost.prompt_tokens,
                    f.cost.completion_tokens,
                    f.cost.usd,
                    cue,
                    decision,
                    reason,
                ),
            )
            return int(cur.lastrowid or 0)

    def hold_made(self, forecast_id: int, *, hold_id: str, gpus: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE forecasts SET hold_id=?, hold_gpus=?, outcome='pending' WHERE id=?",
                (hold_id, gpus, forecast_id),
            )

    def hold_refused(self, forecast_id: int, *, reason: str, at: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE forecasts SET decision='refused', outcome='refused', "
                "outcome_at=?, reason=? WHERE id=?",
                (at, reason, forecast_id),
            )

    def hold_outcome(
        self,
        hold_id: str,
        *,
        outcome: str,
        at: float,
        idle_gpu_minutes: float | None = None,
        claimed_at: float | None = None,
        job_id: int | None = None,
    ) -> None:
        if outcome not in HOLD_OUTCOMES:
            raise ValueError(f"unknown hold outcome {outcome!r}")
        with self._tx() as db:
            db.execute(
                "UPDATE forecasts SET outcome=?, outcome_at=?, idle_gpu_minutes=?, "
                "claimed_at=?, job_id=COALESCE(?, job_id), "
                "lead_s=CASE WHEN ? IS NOT NULL THEN ? - made_at ELSE lead_s END "
                "WHERE hold_id=? AND (outcome IS NULL OR outcome='pending')",
                (
                    outcome,
                    at,
                    idle_gpu_minutes,
                    claimed_at,
                    job_id,
                    claimed_at,
                    claimed_at,
                    hold_id,
                ),
            )

    def job(
        self,
        *,
        at: float,
        user: str,
        gpus: int | None,
        gpu_model: str | None,
        source: str | None,
        job_ref: str | None,
        hold_id: str | None = None,
        allocation_id: str | None = None,
        time_to_gpu_s: float | None = None,
        warm: bool = False,
    ) -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO jobs(at, user, gpus, gpu_model, source, job_ref, hold_id, "
                "allocation_id, time_to_gpu_s, warm) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    at,
                    user,
                    gpus,
                    gpu_model,
                    source,
                    job_ref,
                    hold_id,
                    allocation_id,
                    time_to_gpu_s,
                    int(warm),
                ),
            )
            return int(cur.lastrowid or 0)

    def job_update(self, job_id: int, **values: Any) -> None:
        allowed = {"time_to_gpu_s", "warm", "ended_at", "allocation_id", "hold_id"}
        bad = set(values) - allowed
        if bad:
            raise ValueError(f"cannot update job fields {sorted(bad)}")
        if not values:
            return
        sets = ", ".join(f"{k}=?" for k in values)
        with self._tx() as db:
            db.execute(f"UPDATE jobs SET {sets} WHERE id=?", (*values.values(), job_id))

    def llm_call(
        self,
        *,
        at: float,
        status: str,
        model: str | None,
        prompt_version: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        usd: float,
        latency_s: float | None,
        detail: str | None,
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO llm_calls(at, status, model, prompt_version, prompt_tokens, "
                "completion_tokens, usd, latency_s, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    at,
                    status,
                    model,
                    prompt_version,
                    prompt_tokens,
                    completion_tokens,
                    usd,
                    latency_s,
                    (detail or "")[:500] or None,
                ),
            )

    # --- reading ---------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, params).fetchall()]

    def unlinked_claims(self, *, since: float) -> list[dict[str, Any]]:
        """Holds claimed since `since` by no job this log knows (a backend claimed them)."""
        return self.query(
            "SELECT * FROM forecasts WHERE outcome='claimed' AND job_id IS NULL AND hold_id "
            "IS NOT NULL AND outcome_at >= ? ORDER BY outcome_at",
            (since,),
        )

    def link_claim(self, hold_id: str, job_id: int) -> None:
        """The job (of the jobs table) that claimed the hold, learnt after the claim."""
        with self._tx() as db:
            db.execute(
                "UPDATE forecasts SET job_id=? WHERE hold_id=? AND outcome='claimed' "
                "AND job_id IS NULL",
                (job_id, hold_id),
            )

    def pending_holds(self) -> list[dict[str, Any]]:
        return self.query(
            "SELECT * FROM forecasts WHERE outcome='pending' AND hold_id IS NOT "
            "NULL ORDER BY made_at"
        )

    def idle_gpu_hours_since(self, since: float) -> float:
        rows = self.query(
            "SELECT COALESCE(SUM(idle_gpu_minutes), 0) AS m FROM forecasts WHERE outcome_at >= ?",
            (since,),
        )
        return float(rows[0]["m"]) / 60.0

    def usd_since(self, since: float) -> float:
        rows = self.query(
            "SELECT COALESCE(SUM(usd), 0) AS usd FROM llm_calls WHERE at >= ?", (since,)
        )
        return float(rows[0]["usd"])


def context_summary(context: object) -> dict:
    """What the predictors saw, as features and redacted excerpts (kept for review)."""
    history = getattr(context, "history", None)
    events = getattr(context, "events", ()) or ()
    return {
        "user": getattr(context, "user", None),
        "jobs": getattr(history, "n_jobs", None),
        "recent": [
            {"kind": str(e.kind), "at": e.at, "gpus": e.gpus, "cue": e.cue, "excerpt": e.excerpt}
            for e in list(events)[-10:]
        ],
    }
