"""Reading the log for review: filters, time parsing, one forecast in detail, and the errors."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC
from pathlib import Path

import pytest

from smart_agent.predlog import PredictionLog
from smart_agent.review.query import (
    FilterError,
    Filters,
    ReviewError,
    detail,
    load,
    newest,
    open_log,
    parse_when,
)
from tests.smart_agent.review_helpers import INJECTION, T0, T1, hand_made_log


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("review") / "predictions.db"
    return path, hand_made_log(path)


@pytest.fixture
def db(logged: tuple[Path, dict[str, int]]) -> sqlite3.Connection:
    conn = open_log(logged[0])
    yield conn  # type: ignore[misc]
    conn.close()


def _ids(db: sqlite3.Connection, **kw: object) -> set[int]:
    return {r.id for r in load(db, Filters(**kw)).forecasts}  # type: ignore[arg-type]


def test_filters_by_predictor_outcome_cue_and_decision(
    db: sqlite3.Connection, logged: tuple[Path, dict[str, int]]
) -> None:
    ids = logged[1]
    assert len(_ids(db)) == 18
    assert _ids(db, predictors=("llm",)) == {ids["c1_llm"], ids["c2_llm"], ids["c5_llm"]}
    assert _ids(db, outcomes=("claimed",)) == {ids["c1_acted"], ids["c6_acted"]}
    assert _ids(db, outcomes=("refused", "pending")) == {ids["c4_acted"], ids["c7_acted"]}
    # "none": never a hold (every shadow row and the two rejections).
    assert _ids(db, outcomes=("none",), decisions=("rejected",)) == {
        ids["c2_rejected"],
        ids["c3_rejected"],
    }
    assert _ids(db, cues=("epoch_end",)) == {ids["c4_burst"], ids["c4_acted"]}
    assert _ids(db, decisions=("accepted",), predictors=("burst",)) == set()


def test_time_range_applies_to_forecasts_jobs_and_llm_calls(db: sqlite3.Connection) -> None:
    week = load(db, Filters(since=T1 - 86400))
    assert {r.made_at >= T1 for r in week.forecasts} == {True}
    assert len(week.forecasts) == 7
    assert [j.job_ref for j in week.jobs] == ["j6"]
    assert len(week.llm_calls) == 2
    first = load(db, Filters(until=T0 + 700))  # half-open: the cycle at T0 + 700 is out
    assert len(first.forecasts) == 3 and [j.job_ref for j in first.jobs] == ["j1"]


def test_newest_first_with_a_limit(db: sqlite3.Connection) -> None:
    rows = newest(db, Filters(), 3)
    assert [r.made_at for r in rows] == sorted((r.made_at for r in rows), reverse=True)
    assert rows[0].made_at == T1 + 5000 and len(rows) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", 1_000_000.0 - 7 * 86400),
        ("12h", 1_000_000.0 - 12 * 3600),
        (" 30m ", 1_000_000.0 - 1800),
        ("1.5w", 1_000_000.0 - 1.5 * 7 * 86400),
        ("2026-03-02", T0 - 9 * 3600),
        ("2026-03-02T09:00", T0),
        ("2026-03-02 10:00+01:00", T0),
        ("2026-03-02T09:00:00Z", T0),
    ],
)
def test_parse_when(text: str, expected: float) -> None:
    assert parse_when(text, option="--since", now=1_000_000.0, tz=UTC) == expected


def test_bad_filter_values_name_the_option_and_the_allowed_values() -> None:
    with pytest.raises(FilterError, match=r"--since 'yesterday-ish': allowed values are an ISO"):
        Filters.parse(now=0, tz=UTC, since="yesterday-ish")
    with pytest.raises(FilterError) as err:
        Filters.parse(now=0, tz=UTC, outcomes=["won"])
    assert str(err.value) == (
        "--outcome 'won': allowed values are pending, claimed, expired, cancelled, preempted, "
        "failed, refused, none"
    )
    with pytest.raises(FilterError, match=r"--decision 'maybe'.*shadow, accepted"):
        Filters.parse(now=0, tz=UTC, decisions=["maybe"])
    with pytest.raises(ReviewError, match="--until '1d' is not after --since '1h'"):
        Filters.parse(now=1e6, tz=UTC, since="1h", until="1d")


def test_detail_of_an_acted_forecast(
    db: sqlite3.Connection, logged: tuple[Path, dict[str, int]]
) -> None:
    ids = logged[1]
    found = detail(db, ids["c1_acted"])
    row = found["forecast"]
    assert (row.predictor, row.decision, row.outcome, row.hold_id) == (
        "ensemble",
        "accepted",
        "claimed",
        "h1",
    )
    assert row.rationale == INJECTION and row.lead_s == 600
    assert found["cycle"]["trigger"] == "cue" and found["cycle"]["cue"] == "preprocessing_done"
    assert found["cycle"]["context"]["recent"][0]["excerpt"] == INJECTION
    assert found["job"].job_ref == "j1" and found["job"].warm == 1
    assert [s["id"] for s in found["siblings"]] == [ids["c1_burst"], ids["c1_llm"]]
    refused = detail(db, ids["c4_acted"])["forecast"]
    assert refused.decision == "refused" and "speculative_budget_exceeded" in refused.reason
    with pytest.raises(ReviewError, match="no forecast with id 9999"):
        detail(db, 9999)


def test_missing_log_is_an_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "predictions.db"
    with pytest.raises(ReviewError, match=f"prediction log not found: {missing}"):
        open_log(missing)
    assert not missing.parent.exists()  # nothing created on the way


def test_other_files_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all, just text " * 100)
    with pytest.raises(ReviewError, match="not a prediction log"):
        open_log(junk)
    newer = tmp_path / "newer.db"
    PredictionLog(newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema'")
    conn.close()
    with pytest.raises(ReviewError, match="schema 99 is newer"):
        open_log(newer)


def test_review_never_writes_to_the_log(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    hand_made_log(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    db = open_log(path)
    load(db, Filters())
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("DELETE FROM forecasts")
    db.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_reads_while_the_agent_writes(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path / "live.db")
    log.job(at=T0, user="alice", gpus=1, gpu_model=None, source="t", job_ref="a")
    db = open_log(log.path)
    assert len(load(db, Filters()).jobs) == 1
    log.job(at=T0 + 1, user="alice", gpus=1, gpu_model=None, source="t", job_ref="b")
    assert len(load(db, Filters()).jobs) == 2
    db.close()
    log.close()
