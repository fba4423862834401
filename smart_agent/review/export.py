"""Export of the log for a notebook: forecasts, jobs or LLM calls as CSV or JSON lines."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import Any, TextIO

from smart_agent.review.query import ForecastRow, JobRow, LlmCallRow, Selection, Zone, iso

FORMATS = ("csv", "jsonl")
TABLES = ("forecasts", "jobs", "llm_calls", "all")
# Epoch seconds stay as logged (exact); an ISO copy in the review's time zone rides beside.
_TIMES = {
    "forecasts": ("made_at", "start_at", "end_at", "outcome_at", "claimed_at"),
    "jobs": ("at", "ended_at"),
    "llm_calls": ("at",),
}
_ROWS: dict[str, type] = {"forecasts": ForecastRow, "jobs": JobRow, "llm_calls": LlmCallRow}


def columns(table: str) -> list[str]:
    names = [f.name for f in fields(_ROWS[table])]
    return names + [f"{name}_iso" for name in _TIMES[table]]


def records_of(rows: Iterable[Any], table: str, tz: Zone) -> Iterator[dict[str, Any]]:
    """Rows of one table as plain dicts, with the ISO copies of their times."""
    for row in rows:
        out = asdict(row)
        for name in _TIMES[table]:
            out[f"{name}_iso"] = iso(out[name], tz)
        yield out


def records(selection: Selection, table: str, tz: Zone) -> Iterator[dict[str, Any]]:
    """The selection's rows of one table, oldest first."""
    return records_of(getattr(selection, table), table, tz)


def write(selection: Selection, out: TextIO, *, fmt: str, table: str, tz: Zone) -> int:
    """Write one table (or, as JSON lines, every table with a "table" key); returns the rows."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if table == "all" and fmt == "csv":
        raise ValueError("CSV holds one table: choose forecasts, jobs or llm_calls")
    tables = [t for t in TABLES if t != "all"] if table == "all" else [table]
    n = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=columns(table), lineterminator="\n")
        writer.writeheader()
        for record in records(selection, table, tz):
            writer.writerow(record)
            n += 1
        return n
    for name in tables:
        for record in records(selection, name, tz):
            if table == "all":
                record = {"table": name, **record}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n
