"""Scoring of forecasts against jobs, offline (prediction log) and online (hold book)."""

from __future__ import annotations

import pytest

from predictors import Cost, Forecast, ForecastRecord, HoldBook, JobRecord, Score, match, score


def fc(start: float, end: float, gpus: int = 1, conf: float = 0.5, **kw) -> Forecast:
    return Forecast(start, end, gpus, conf, "p", **kw)


def test_match_pairs_each_job_with_at_most_one_forecast() -> None:
    forecasts = [(fc(0, 100, gpus=2), 0.0), (fc(50, 200, gpus=1), 0.0)]
    jobs = [JobRecord("u", 60, 1), JobRecord("u", 70, 2)]
    records = match(forecasts, jobs)
    # The 1-GPU job takes the window that ends first; the 2-GPU job fits nothing left.
    assert [r.claimed_at for r in records] == [60, None]
    s = score(records, jobs)
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (2, 1, 2, 1)
    assert s.precision == 0.5 and s.recall == 0.5
    assert s.idle_gpu_s == 2 * 60 + 1 * 150
    assert s.mean_lead_s == 60


def test_match_respects_made_at_user_and_model() -> None:
    forecasts = [
        (fc(0, 100), 80.0),  # made after the job
        (fc(0, 100, user="bob"), 0.0),
        (fc(0, 100, gpu_model="A100"), 0.0),
    ]
    jobs = [JobRecord("alice", 50, 1, gpu_model="V100")]
    assert all(not r.hit for r in match(forecasts, jobs))
    assert match([(fc(0, 100, gpu_model="A100"), 0.0)], [JobRecord("a", 50, 1)])[0].hit


def test_match_prefers_smaller_then_more_confident() -> None:
    forecasts = [(fc(0, 100, gpus=8), 0.0), (fc(0, 100, gpus=2, conf=0.1), 0.0)]
    forecasts.append((fc(0, 100, gpus=2, conf=0.9), 0.0))
    records = match(forecasts, [JobRecord("u", 10, 1)])
    assert [r.hit for r in records] == [False, False, True]


def test_score_leaves_open_windows_out_and_sums_cost() -> None:
    records = [
        ForecastRecord(fc(0, 100, cost=Cost(10, 5, 0.01)), 0.0),
        ForecastRecord(fc(0, 1000, cost=Cost(10, 5, 0.02)), 0.0),
    ]
    s = score(records, 3, now=500)
    assert s.forecasts == 1 and s.jobs == 3
    assert s.cost == Cost(20, 10, 0.03)
    assert s.calibration == 0.0


def test_score_utility_and_addition() -> None:
    s = Score(forecasts=4, claimed=3, jobs=5, covered=3, idle_gpu_s=7200, cost=Cost(usd=0.5))
    assert s.utility(idle_gpu_hour_weight=0.5, usd_weight=1.0) == pytest.approx((3 - 1 - 0.5) / 5)
    total = s + s
    assert (total.jobs, total.covered, total.idle_gpu_hours) == (10, 6, 4.0)
    assert Score().precision == 0.0 and Score().recall == 0.0 and Score().mean_lead_s is None


def test_hold_book_merges_repeats_and_keeps_burst_slots() -> None:
    book = HoldBook()
    book.offer([fc(0, 600)], now=0)
    book.offer([fc(100, 700)], now=100)  # the same hold, refreshed and extended
    assert book.open_holds == 1
    book.offer([fc(200, 800), fc(200, 800, conf=0.3)], now=200)  # two jobs expected
    assert book.open_holds == 2


def test_hold_book_claims_and_expires() -> None:
    book = HoldBook(min_confidence=0.4)
    book.offer([fc(0, 600, gpus=4), fc(0, 600, conf=0.2)], now=0)  # the 0.2 one is no hold
    assert book.open_holds == 1
    assert book.job(300, 2) is True
    assert book.job(310, 1) is False
    book.offer([fc(400, 1000, gpus=1)], now=400)
    book.expire(2000)
    s = book.score()
    assert (s.forecasts, s.claimed, s.jobs, s.covered) == (2, 1, 2, 1)
    assert s.idle_gpu_s == 4 * 300 + 1 * 600
    assert s.mean_lead_s == 300


def test_hold_book_future_hold_moves_earlier_but_not_a_warm_one() -> None:
    book = HoldBook()
    book.offer([fc(500, 900)], now=0)
    book.offer([fc(300, 900)], now=100)
    book.job(350, 1)
    assert book.score().idle_gpu_s == 50


def test_hold_book_decay_forgets_old_record() -> None:
    book = HoldBook(decay=0.5)
    book.offer([fc(0, 10)], now=0)
    book.expire(20)
    for at in (30, 40, 50):
        book.job(at, 1)
    assert book.forecasts == pytest.approx(0.125)
    assert book.jobs == pytest.approx(1 + 0.5 + 0.25)
    assert book.utility() < 0
