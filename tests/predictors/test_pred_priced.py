"""Priced burst forecasts: hold values from gap samples, the pool, gaps by kind, clump slots."""

from __future__ import annotations

import pytest
from pred_helpers import T0, builder_with, finish, submit

from predictors import HistoryBuilder, HistoryConfig
from predictors._stats import SortedWindow
from predictors.burst import BurstPredictor
from predictors.history import AFTER_FINISH, AFTER_SUBMIT, GapPool
from predictors.holdvalue import best_hold, moments
from predictors.stream import StreamForecaster


def _window(values: list[float]) -> SortedWindow:
    window = SortedWindow(64)
    for v in values:
        window.add(v)
    return window


def test_sum_between_and_moments_are_exact() -> None:
    w = _window([30.0, 200.0, 500.0, 5000.0])
    assert w.sum_between(30.0, 500.0) == 730.0 and w.sum_between(31.0, 499.0) == 200.0
    n, (m,) = moments(w, 0.0, (600.0,), 120.0)
    # By 600 s three of four arrived; idle = (30 + 200 + 500 + 600) / 4; a fresh hold saves
    # 30 s on the first and the whole 120 s on the next two.
    assert n == 4 and m == pytest.approx((0.75, 332.5, (30 + 120 + 120) / 4))
    n, (m,) = moments(w, 100.0, (600.0,), 120.0)  # given the gap lasted 100 s already
    assert n == 3 and m == pytest.approx((2 / 3, (100 + 400 + 500) / 3, (100 + 120) / 3))


def test_best_hold_picks_the_window_worth_its_idle() -> None:
    w = _window([240.0] * 9 + [20_000.0])  # the next job comes 4 minutes after, or much later
    warm = best_hold(w, None, 0.0, 0.0, gpus=1, price=0.01, lead_s=120.0, warm=True)
    assert warm is not None and warm.end_s == 300.0 and warm.hit == pytest.approx(0.9)
    assert warm.saved_s == pytest.approx(108.0)
    # Eight times the GPUs for the same arrivals: not worth it at this price.
    assert best_hold(w, None, 0.0, 0.0, gpus=8, price=0.1, lead_s=120.0, warm=True) is None
    # Set aside now, a hold is warm at 120 s: the job at 240 s gets all of it.
    fresh = best_hold(w, None, 0.0, 0.0, gpus=1, price=0.01, lead_s=120.0, warm=False)
    assert fresh is not None and fresh.saved_s == pytest.approx(108.0)
    # Past the burst's gaps only the long tail remains: nothing pays.
    assert best_hold(w, None, 0.0, 300.0, gpus=1, price=0.01, lead_s=120.0, warm=True) is None


def test_a_user_without_a_record_borrows_the_populations() -> None:
    empty = _window([])
    pool = _window([100.0] * 20)
    assert best_hold(empty, None, 16.0, 0.0, gpus=1, price=0.01, lead_s=120.0, warm=True) is None
    choice = best_hold(empty, pool, 16.0, 0.0, gpus=1, price=0.01, lead_s=120.0, warm=True)
    assert choice is not None and choice.end_s == 120.0 and choice.hit == 1.0
    # The user's own record outweighs the pool as it grows: 64 samples against 16.
    own = _window([30_000.0] * 64)
    mixed = best_hold(own, pool, 16.0, 0.0, gpus=1, price=0.01, lead_s=120.0, warm=True)
    assert mixed is not None and mixed.hit == pytest.approx(0.2)
    assert best_hold(own, pool, 16.0, 0.0, gpus=1, price=0.3, lead_s=120.0, warm=True) is None


def test_idle_gaps_by_kind_feed_the_pool_in_batches() -> None:
    config = HistoryConfig(pool_gaps=64)
    builder = HistoryBuilder(config)
    assert builder.pool is not None
    builder.pool.batch = 2
    builder.observe_all(
        [
            submit(T0, job="a"),
            submit(T0 + 10, job="b"),  # 10 s after a submit
            finish(T0 + 100, job="a"),
            submit(T0 + 400, job="c"),  # 300 s after a finish
        ]
    )
    h = builder.history("alice")
    assert h.idle_gaps_by_kind[AFTER_SUBMIT].values() == [10]
    assert h.idle_gaps_by_kind[AFTER_FINISH].values() == [300]
    assert h.last_activity_kind == AFTER_SUBMIT
    assert builder.pool.by_kind[AFTER_FINISH].values() == [300]
    assert builder.context("alice", T0 + 400).pool is builder.pool
    assert GapPool(8).memo == {}
    with pytest.raises(ValueError):
        HistoryConfig(pool_gaps=-1)


def _regular(gpus: int = 1) -> list:
    """A user whose next job comes 200 s after the previous one ends, 30 times."""
    events = []
    for i in range(30):
        at = T0 + 300.0 * i
        events += [submit(at, gpus=gpus, job=f"j{i}"), finish(at + 100, gpus=gpus, job=f"j{i}")]
    return events


def test_priced_burst_keeps_small_jobs_longer_than_large_ones() -> None:
    price = BurstPredictor(window_s=21600, price=0.01, size="ending")
    small = builder_with(*_regular(1)).context("alice", T0 + 8800)
    (f,) = price.predict(small, T0 + 8800)  # right after the last finish
    assert f.start_at == T0 + 8800 and f.end_at == T0 + 8800 + 300
    assert f.confidence > 0.8 and "worth holding" in f.rationale
    big = builder_with(*_regular(64)).context("alice", T0 + 8800)
    assert price.predict(big, T0 + 8800) == []


def test_priced_burst_adds_clump_slots_for_users_who_submit_in_clumps() -> None:
    events = []
    for i in range(20):
        at = T0 + 1800.0 * i
        events += [submit(at + 5 * k, job=f"j{i}-{k}") for k in range(3)]
    now = T0 + 1800.0 * 19 + 10 + 1000  # 1000 s after the last clump; the next is due at 1790
    context = builder_with(*events).context("alice", now)
    one = BurstPredictor(window_s=21600, price=0.001)
    three = BurstPredictor(window_s=21600, price=0.001, max_jobs=3)
    assert len(one.predict(context, now)) == 1
    slots = three.predict(context, now)
    assert len(slots) == 3 and "job 3 of a clump" in slots[2].rationale
    assert slots[2].confidence <= slots[0].confidence


def test_priced_options_are_checked() -> None:
    with pytest.raises(ValueError, match="price"):
        BurstPredictor(price=0.0)
    with pytest.raises(ValueError, match="ending"):
        BurstPredictor(size="ending")
    with pytest.raises(ValueError, match="pool_weight"):
        BurstPredictor(price=0.01, pool_weight=-1)


def test_stream_without_dedup_returns_every_forecast() -> None:
    events = _regular(1)[:6]
    for new_only, expected in ((True, 1), (False, 2)):
        stream = StreamForecaster(BurstPredictor(600.0), new_only=new_only)
        for event in events:
            stream.observe(event)
        first = stream.forecast(T0 + 700)
        stream.observe(events[-1])  # the same user again: asked again
        assert len(first) + len(stream.forecast(T0 + 701)) == expected
