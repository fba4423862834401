"""`jitgpu predictions list|show|score|report|export`: what was predicted, why, what happened
and what it cost, read from the local prediction log (never changed by these commands)."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any, NoReturn

import typer

from smart_agent.cli.common import JsonOpt, console
from smart_agent.review import export as exporter
from smart_agent.review import tables
from smart_agent.review.query import (
    DECISIONS,
    LOG_ENV,
    OUTCOMES,
    FilterError,
    Filters,
    ForecastRow,
    ReviewError,
    Zone,
    default_log_path,
    detail,
    iso,
    load,
    newest,
    open_log,
)
from smart_agent.review.report import build
from smart_agent.review.score import compute

predictions_app = typer.Typer(
    help="Review the prediction log: what was predicted, why, what happened, what it cost.",
    no_args_is_help=True,
)

LogOpt = typer.Option(
    None,
    "--log",
    help=f"Prediction log \\[default: ~/.local/share/jitgpu/predictions.db, or ${LOG_ENV}].",
)
SinceOpt = typer.Option(
    None, "--since", help="From this time: ISO date or time (local), or an age: 30m, 12h, 7d, 2w."
)
UntilOpt = typer.Option(None, "--until", help="Before this time (same forms as --since).")
PredictorOpt = typer.Option(None, "--predictor", help="Only this predictor (repeatable).")
OutcomeOpt = typer.Option(
    None, "--outcome", help=f"Only this hold outcome (repeatable): {', '.join(OUTCOMES)}."
)
CueOpt = typer.Option(None, "--cue", help="Only forecasts made on this cue (repeatable).")
DecisionOpt = typer.Option(
    None, "--decision", help=f"Only this decision (repeatable): {', '.join(DECISIONS)}."
)
UtcOpt = typer.Option(False, "--utc", help="Read and show times in UTC, not local time.")


def _zone(utc: bool) -> Zone:
    return UTC if utc else None


@contextmanager
def _session(log: Path | None) -> Iterator[sqlite3.Connection]:
    """The log, opened read-only; review errors end the command with one line."""
    try:
        db = open_log(log or default_log_path())
    except ReviewError as exc:
        _fail(exc)
    try:
        yield db
    except ReviewError as exc:
        _fail(exc)
    finally:
        db.close()


def _fail(exc: ReviewError) -> NoReturn:
    # A bad option value is a usage error (2), like typer's own; anything else is 1.
    # Plain echo, not rich: one line however long the path, and log text is never markup.
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2 if isinstance(exc, FilterError) else 1)


def _filters(
    utc: bool,
    *,
    since: str | None,
    until: str | None,
    predictors: list[str] | None = None,
    outcomes: list[str] | None = None,
    cues: list[str] | None = None,
    decisions: list[str] | None = None,
) -> Filters:
    try:
        return Filters.parse(
            now=time.time(),
            tz=_zone(utc),
            since=since,
            until=until,
            predictors=predictors or (),
            outcomes=outcomes or (),
            cues=cues or (),
            decisions=decisions or (),
        )
    except ReviewError as exc:
        _fail(exc)


def _describe(filters: Filters, tz: Zone) -> str:
    parts = []
    if filters.since is not None:
        parts.append(f"since {iso(filters.since, tz)}")
    if filters.until is not None:
        parts.append(f"until {iso(filters.until, tz)}")
    for name, values in (
        ("predictor", filters.predictors),
        ("outcome", filters.outcomes),
        ("cue", filters.cues),
        ("decision", filters.decisions),
    ):
        if values:
            parts.append(f"{name} {', '.join(values)}")
    return "; ".join(parts)


def _row_json(row: ForecastRow, tz: Zone) -> dict[str, Any]:
    return next(exporter.records_of([row], "forecasts", tz))


@predictions_app.command("list")
def list_(
    log: Path | None = LogOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    predictor: list[str] | None = PredictorOpt,
    outcome: list[str] | None = OutcomeOpt,
    cue: list[str] | None = CueOpt,
    decision: list[str] | None = DecisionOpt,
    limit: int = typer.Option(50, "--limit", min=1, max=100_000, help="At most this many."),
    utc: bool = UtcOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List forecasts, newest first: decision, hold and outcome of each."""
    tz = _zone(utc)
    filters = _filters(
        utc,
        since=since,
        until=until,
        predictors=predictor,
        outcomes=outcome,
        cues=cue,
        decisions=decision,
    )
    with _session(log) as db:
        rows = newest(db, filters, limit)
    if as_json:
        print(json.dumps([_row_json(r, tz) for r in rows], indent=2))
        return
    console.print(tables.forecasts(rows, tz, zone="UTC" if utc else "local time"))


@predictions_app.command("show")
def show(
    forecast_id: int = typer.Argument(..., help="Forecast id (from `jitgpu predictions list`)."),
    log: Path | None = LogOpt,
    utc: bool = UtcOpt,
    as_json: bool = JsonOpt,
) -> None:
    """One forecast: window, rationale, prompt, the redacted context it saw, the decision and
    its reason, the hold, the outcome, the job, tokens and cost."""
    tz = _zone(utc)
    with _session(log) as db:
        found = detail(db, forecast_id)
    row: ForecastRow = found["forecast"]
    job = found["job"]
    data = {
        "forecast": _row_json(row, tz),
        "cycle": found["cycle"],
        "job": None if job is None else next(exporter.records_of([job], "jobs", tz)),
        "siblings": found["siblings"],
    }
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for part in tables.detail(found, tz):
        console.print(part)


@predictions_app.command("score")
def score(
    log: Path | None = LogOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    predictor: list[str] | None = PredictorOpt,
    cue: list[str] | None = CueOpt,
    utc: bool = UtcOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Per predictor and ISO week: precision of holds, recall of jobs, lead, idle GPU-hours,
    time-to-GPU saved and LLM dollars, beside the statistical baseline run in shadow."""
    tz = _zone(utc)
    filters = _filters(utc, since=since, until=until, cues=cue)
    with _session(log) as db:
        selection = load(db, filters)
    scores = compute(selection, now=time.time(), tz=tz, predictors=predictor or ())
    if as_json:
        print(json.dumps(scores.as_dict(), indent=2))
        return
    for part in tables.scores(scores):
        console.print(part)


@predictions_app.command("report")
def report(
    out: Path = typer.Option(..., "--out", help="HTML file to write (self-contained)."),
    log: Path | None = LogOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    predictor: list[str] | None = PredictorOpt,
    cue: list[str] | None = CueOpt,
    utc: bool = UtcOpt,
) -> None:
    """Write a self-contained HTML page: scores, forecasts against job starts, calibration,
    idle GPU-hours and LLM cost per day."""
    tz = _zone(utc)
    filters = _filters(utc, since=since, until=until, cues=cue)
    path = log or default_log_path()
    with _session(path) as db:
        selection = load(db, filters)
    now = time.time()
    scores = compute(selection, now=now, tz=tz, predictors=predictor or ())
    shown = Filters(filters.since, filters.until, tuple(predictor or ()), (), filters.cues)
    described = _describe(shown, tz)
    html = build(selection, scores, tz=tz, source=path.name, filters=described, generated_at=now)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as exc:
        _fail(ReviewError(f"cannot write {out}: {exc.strerror}"))
    typer.echo(f"wrote {out} ({len(selection.forecasts)} forecasts, {len(selection.jobs)} jobs)")


@predictions_app.command("export")
def export(
    out: str = typer.Option(..., "--out", help="File to write, or - for standard output."),
    fmt_: str | None = typer.Option(
        None, "--format", help="csv or jsonl \\[default: from the --out suffix]."
    ),
    table: str = typer.Option(
        "forecasts", "--table", help="forecasts, jobs, llm_calls, or all (jsonl only)."
    ),
    log: Path | None = LogOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    predictor: list[str] | None = PredictorOpt,
    outcome: list[str] | None = OutcomeOpt,
    cue: list[str] | None = CueOpt,
    decision: list[str] | None = DecisionOpt,
    utc: bool = UtcOpt,
) -> None:
    """Export rows for a notebook: epoch seconds as logged, plus ISO copies (`*_iso`)."""
    if fmt_ is None:
        fmt_ = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(Path(out).suffix.lower())
        if fmt_ is None:
            _fail(FilterError("--format", "(none)", "csv, jsonl (or an --out ending .csv/.jsonl)"))
    if fmt_ not in exporter.FORMATS:
        _fail(FilterError("--format", fmt_, ", ".join(exporter.FORMATS)))
    if table not in exporter.TABLES:
        _fail(FilterError("--table", table, ", ".join(exporter.TABLES)))
    if table == "all" and fmt_ == "csv":
        _fail(FilterError("--table", table, "forecasts, jobs, llm_calls with --format csv"))
    tz = _zone(utc)
    filters = _filters(
        utc,
        since=since,
        until=until,
        predictors=predictor,
        outcomes=outcome,
        cues=cue,
        decisions=decision,
    )
    with _session(log) as db:
        selection = load(db, filters)
    if out == "-":
        exporter.write(selection, sys.stdout, fmt=fmt_, table=table, tz=tz)
        return
    try:
        with open(out, "w", encoding="utf-8", newline="") as handle:
            n = exporter.write(selection, handle, fmt=fmt_, table=table, tz=tz)
    except OSError as exc:
        _fail(ReviewError(f"cannot write {out}: {exc.strerror}"))
    typer.echo(f"wrote {n} rows to {out}", err=True)
