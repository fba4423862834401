"""Scores of the hand-made prediction log: every figure below is worked out by hand from the
log that `review_helpers.hand_made_log` writes (its docstring lists the holds and jobs)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest

from predictors.types import Forecast
from smart_agent.predlog import PredictionLog
from smart_agent.review.query import Filters, load, open_log
from smart_agent.review.score import Line, Scores, calibration, compute, pick_baseline
from tests.smart_agent.review_helpers import LATER, T0, T1, USER, hand_made_log


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Written once: review only reads (its connection is read-only).
    path = tmp_path_factory.mktemp("review") / "predictions.db"
    hand_made_log(path)
    return path


def _scores(path: Path, now: float = LATER, **kw: object) -> Scores:
    db = open_log(path)
    try:
        selection = load(db, Filters(**kw))  # type: ignore[arg-type]
    finally:
        db.close()
    return compute(selection, now=now, tz=UTC)


def _line(scores: Scores, period: str, role: str, predictor: str) -> Line:
    found = [p for p in scores.periods if p.label == period]
    assert found, [p.label for p in scores.periods]
    return next(ln for ln in found[0].lines if ln.role == role and ln.predictor == predictor)


@pytest.fixture
def scores(log_path: Path) -> Iterator[Scores]:
    yield _scores(log_path)


def test_periods_are_iso_weeks_then_all(scores: Scores) -> None:
    assert [p.label for p in scores.periods] == ["2026-W10", "2026-W11", "all"]
    assert scores.baseline == "burst"


def test_real_holds_per_week(scores: Scores) -> None:
    w10 = _line(scores, "2026-W10", "acted", "ensemble")
    s = w10.score
    # h1 claimed, h2 expired; 4 GPU jobs (j4 has none), j1 took h1.
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (2, 1, 4, 1)
    assert (s.precision, s.recall) == (0.5, 0.25)
    assert s.mean_lead_s == 600
    assert s.idle_gpu_minutes == pytest.approx(18 + 20)
    assert w10.ttg_saved_s == pytest.approx(100 - 1.0)
    assert w10.outcomes == {"claimed": 1, "expired": 1, "refused": 1, "rejected": 2}
    w11 = _line(scores, "2026-W11", "acted", "ensemble")
    s = w11.score
    # h3 cancelled, h4 claimed by j6, h5 pending (not counted as a hold yet).
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (2, 1, 1, 1)
    assert s.mean_lead_s == 200
    assert s.idle_gpu_minutes == pytest.approx(20 + 200 / 60)
    assert w11.ttg_saved_s == pytest.approx(100 - 0.5)
    assert w11.outcomes == {"cancelled": 1, "claimed": 1, "pending": 1}


def test_real_holds_overall(scores: Scores) -> None:
    line = _line(scores, "all", "acted", "ensemble")
    s = line.score
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (4, 2, 5, 2)
    assert (s.precision, s.recall) == (0.5, 0.4)
    assert s.mean_lead_s == 400
    assert s.idle_gpu_hours == pytest.approx((38 + 20 + 200 / 60) / 60)
    assert line.ttg_saved_s == pytest.approx(99 + 99.5)
    assert s.cost.usd == 0


def test_baseline_in_shadow_counts_a_repeat_once(scores: Scores) -> None:
    w10 = _line(scores, "2026-W10", "shadow", "burst")
    s = w10.score
    # Virtual holds [60,660] (j1, lead 600), [700,1300] (missed; the forecast at 710 repeats
    # it) and [7200,7800] (j5, lead 300).
    assert w10.is_baseline and w10.vs_baseline is None
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (3, 2, 4, 2)
    assert s.mean_lead_s == 450
    assert s.idle_gpu_s == 2 * 540 + 2 * 600 + 1 * 300
    assert w10.outcomes == {"hit": 2, "miss": 1, "repeats": 1}
    # Each covered job would have saved the cold median minus the warm median.
    assert w10.ttg_saved_s == pytest.approx(2 * (100 - 0.75))
    w11 = _line(scores, "2026-W11", "shadow", "burst")
    assert (w11.score.forecasts, w11.score.claimed, w11.score.covered) == (3, 1, 1)
    assert w11.score.idle_gpu_s == 4 * 600 + 1 * 200 + 2 * 600
    total = _line(scores, "all", "shadow", "burst").score
    assert (total.precision, total.recall) == (0.5, 0.6)
    assert total.mean_lead_s == pytest.approx((600 + 300 + 200) / 3)


def test_llm_in_shadow_with_its_dollars_and_the_gap_to_the_baseline(scores: Scores) -> None:
    w10 = _line(scores, "2026-W10", "shadow", "llm")
    s = w10.score
    assert (s.forecasts, s.claimed, s.covered) == (2, 2, 2)
    assert s.mean_lead_s == (600 + 2500) / 2
    assert s.cost.usd == pytest.approx(0.03)
    assert (s.cost.prompt_tokens, s.cost.completion_tokens) == (2500, 500)
    total = _line(scores, "all", "shadow", "llm")
    assert total.score.precision == pytest.approx(2 / 3)
    assert total.score.recall == pytest.approx(0.4)
    assert total.score.cost.usd == pytest.approx(0.06)
    v = total.vs_baseline
    assert v is not None
    assert v["precision"] == pytest.approx(2 / 3 - 0.5)
    assert v["recall"] == pytest.approx(0.4 - 0.6)
    assert v["idle_gpu_hours"] == pytest.approx((800 + 2400 - 6380) / 3600)
    assert v["time_to_gpu_saved_s"] == pytest.approx(-99.25)
    assert v["llm_usd"] == pytest.approx(0.06)


def test_period_totals_come_from_jobs_and_llm_calls(scores: Scores) -> None:
    w10, w11, total = scores.periods
    assert (w10.jobs, w10.warm_jobs, w10.llm_calls, w10.llm_tokens) == (4, 1, 2, 3000)
    assert w10.llm_usd == pytest.approx(0.03)
    # The failed call of W11 cost money too: calls count, not forecasts.
    assert (w11.jobs, w11.warm_jobs, w11.llm_calls, w11.llm_tokens) == (1, 1, 2, 2900)
    assert w11.llm_usd == pytest.approx(0.035)
    assert total.ttg_saved_s == pytest.approx(198.5)
    assert total.idle_gpu_hours == pytest.approx((38 + 20 + 200 / 60) / 60)
    ttg = scores.time_to_gpu
    assert (ttg.cold_median_s, ttg.cold_jobs, ttg.warm_median_s, ttg.warm_jobs) == (
        100.0,
        3,
        0.75,
        2,
    )
    assert "median time-to-GPU of the 3 cold job(s)" in ttg.method


def test_windows_still_open_are_neither_hit_nor_miss(log_path: Path) -> None:
    # At T0 + 1000 the burst window [700, 1300] is open and the llm's [3000, 3600] too.
    scores = _scores(log_path, now=T0 + 1000, until=T0 + 1000)
    burst = _line(scores, "all", "shadow", "burst")
    assert burst.outcomes == {"hit": 1, "open": 1, "repeats": 1}
    assert (burst.score.forecasts, burst.score.claimed) == (1, 1)
    llm = _line(scores, "all", "shadow", "llm")
    assert llm.outcomes == {"hit": 1, "open": 1, "repeats": 0}


def test_predictor_filter_keeps_the_baseline(log_path: Path) -> None:
    db = open_log(log_path)
    selection = load(db, Filters())
    db.close()
    scores = compute(selection, now=LATER, tz=UTC, predictors=["llm"])
    keys = {(ln.role, ln.predictor) for ln in scores.total.lines}
    assert keys == {("shadow", "llm"), ("shadow", "burst")}
    assert {h.predictor for h in scores.holds} == {"llm", "burst"}
    # The totals stay the agent's: the real holds' idle time, every job.
    assert scores.total.idle_gpu_hours > 0 and scores.total.jobs == 5


def test_week_boundaries_follow_the_time_zone(log_path: Path) -> None:
    from zoneinfo import ZoneInfo

    db = open_log(log_path)
    selection = load(db, Filters())
    db.close()
    # 09:00 UTC on Monday is still Sunday 23:00 in Honolulu: h1 and h2 fall a week earlier.
    scores = compute(selection, now=LATER, tz=ZoneInfo("Pacific/Honolulu"))
    assert [p.label for p in scores.periods] == ["2026-W09", "2026-W10", "2026-W11", "all"]
    assert _line(scores, "2026-W09", "acted", "ensemble").score.forecasts == 2
    assert _line(scores, "2026-W09", "acted", "ensemble").score.jobs == 2  # j1, j2


def test_calibration_bins(scores: Scores) -> None:
    bins = calibration(scores.holds)
    burst = {(b.low, b.hits, b.holds) for b in bins[("shadow", "burst")]}
    # Confidences 0.8 hit, 0.6 miss, 0.7 hit, 0.9 miss, 0.4 hit, 0.5 miss.
    assert burst == {(0.8, 1, 1), (0.6, 0, 1), (0.7, 1, 1), (0.9, 0, 1), (0.4, 1, 1), (0.5, 0, 1)}
    acted = bins[("acted", "ensemble")]
    assert sum(b.holds for b in acted) == 4 and sum(b.hits for b in acted) == 2


def test_baseline_is_the_first_statistical_member_without_burst(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path / "p.db")
    for name, prompt in (("llm", "v3"), ("histogram", None), ("ewma", None)):
        f = Forecast(T1, T1 + 60, 1, 0.5, name, prompt_version=prompt, user=USER)
        log.forecast(f, cycle_id=None, made_at=T1, user=USER, decision="shadow", reason="s")
    db = open_log(log.path)
    rows = load(db, Filters()).forecasts
    db.close()
    log.close()
    assert pick_baseline(rows) == "histogram"
    assert pick_baseline([r for r in rows if r.predictor == "llm"]) is None


def test_an_empty_log_scores_nothing(tmp_path: Path) -> None:
    PredictionLog(tmp_path / "empty.db").close()
    scores = _scores(tmp_path / "empty.db")
    assert [p.label for p in scores.periods] == ["all"]
    assert scores.total.lines == [] and scores.baseline is None
    assert scores.time_to_gpu.cold_median_s is None
    assert scores.as_dict()["all"]["jobs"] == 0
