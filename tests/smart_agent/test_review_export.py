"""Export for a notebook: CSV and JSON lines give back exactly what the log holds."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC
from pathlib import Path

import pytest

from smart_agent.review.export import columns, write
from smart_agent.review.query import Filters, load, open_log
from tests.smart_agent.review_helpers import INJECTION, hand_made_log


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("review") / "predictions.db"
    hand_made_log(path)
    return path


def _table(path: Path, table: str) -> list[dict]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
    conn.close()
    return rows


def _export(path: Path, fmt: str, table: str) -> str:
    db = open_log(path)
    out = io.StringIO(newline="")
    write(load(db, Filters()), out, fmt=fmt, table=table, tz=UTC)
    db.close()
    return out.getvalue()


@pytest.mark.parametrize("table", ["forecasts", "jobs", "llm_calls"])
def test_jsonl_round_trip(log_path: Path, table: str) -> None:
    lines = [json.loads(x) for x in _export(log_path, "jsonl", table).splitlines()]
    logged = _table(log_path, table)
    assert [{k: r[k] for k in logged[0]} for r in lines] == logged
    assert lines[0]["at_iso" if table != "forecasts" else "made_at_iso"].endswith("+00:00")


@pytest.mark.parametrize("table", ["forecasts", "jobs", "llm_calls"])
def test_csv_round_trip(log_path: Path, table: str) -> None:
    text = _export(log_path, "csv", table)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    assert reader.fieldnames == columns(table)
    rows = list(reader)
    logged = _table(log_path, table)
    assert len(rows) == len(logged)
    for got, want in zip(rows, logged, strict=True):
        # CSV holds text: empty for NULL, Python's repr for numbers (exact for floats).
        assert {k: got[k] for k in want} == {
            k: "" if v is None else str(v) for k, v in want.items()
        }


def test_untrusted_text_survives_csv_quoting(log_path: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(log_path, "csv", "forecasts"), newline="")))
    assert sum(r["rationale"] == INJECTION for r in rows) == 2


def test_jsonl_of_every_table_says_which(log_path: Path) -> None:
    lines = [json.loads(x) for x in _export(log_path, "jsonl", "all").splitlines()]
    counts = {t: sum(x["table"] == t for x in lines) for t in ("forecasts", "jobs", "llm_calls")}
    assert counts == {"forecasts": 18, "jobs": 6, "llm_calls": 4}


def test_csv_of_every_table_is_refused(log_path: Path) -> None:
    with pytest.raises(ValueError, match="CSV holds one table"):
        _export(log_path, "csv", "all")
