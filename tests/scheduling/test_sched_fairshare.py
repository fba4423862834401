"""Fair share on decayed usage, aging, and the token bucket, all with a fixed `now`."""

from __future__ import annotations

import math

import pytest

from control_plane.scheduling.fairshare import (
    DecayedUsage,
    PendingView,
    TokenBucket,
    decay,
    fair_share_factors,
    order_pending,
    pick_next,
    priority,
)

HOUR = 3600.0


def test_usage_halves_every_half_life() -> None:
    assert decay(100.0, HOUR, HOUR) == pytest.approx(50.0)
    assert decay(100.0, 3 * HOUR, HOUR) == pytest.approx(12.5)
    assert decay(100.0, -5.0, HOUR) == 100.0
    usage = DecayedUsage().charge(800.0, now=0.0, half_life_s=HOUR)
    usage = usage.charge(100.0, now=2 * HOUR, half_life_s=HOUR)
    assert usage.value == pytest.approx(300.0)
    assert usage.at_time(3 * HOUR, HOUR) == pytest.approx(150.0)


def test_charge_never_moves_time_backwards() -> None:
    usage = DecayedUsage(100.0, at=10.0).charge(10.0, now=5.0, half_life_s=HOUR)
    assert usage.at == 10.0 and usage.value == pytest.approx(110.0)


def test_factors_favour_the_light_user_and_respect_weights() -> None:
    factors = fair_share_factors({"heavy": 900.0, "light": 100.0}, {})
    assert factors["light"] > factors["heavy"]
    assert factors["heavy"] == pytest.approx(2 ** -(0.9 / 0.5))
    # At usage exactly proportional to weight, both score 0.5.
    even = fair_share_factors({"a": 300.0, "b": 100.0}, {"a": 3.0, "b": 1.0})
    assert even["a"] == pytest.approx(0.5) and even["b"] == pytest.approx(0.5)
    assert fair_share_factors({}, {"idle": 1.0}) == {"idle": 1.0}


def test_factors_can_be_scored_against_totals_of_all_tenants() -> None:
    only = fair_share_factors({"a": 100.0}, {"a": 1.0}, total_usage=400.0, total_weight=4.0)
    assert only["a"] == pytest.approx(0.5)


def test_pending_order_serves_the_light_tenant_first_then_ages() -> None:
    factors = fair_share_factors({"heavy": 900.0, "light": 100.0}, {})
    heavy = PendingView("h1", "heavy", 1, submitted_at=0.0)
    light = PendingView("l1", "light", 1, submitted_at=60.0)
    assert [p.id for p in order_pending([heavy, light], factors, now=120.0)] == ["l1", "h1"]
    # Both age alike, so the light tenant keeps its lead over a request only a minute older...
    assert pick_next([heavy, light], factors, now=2 * HOUR) == light
    # ...but an hour of waiting is worth a whole fair-share unit: the heavy tenant's request
    # outranks a light one submitted 50 minutes after it.
    later = PendingView("l2", "light", 1, submitted_at=3000.0)
    assert pick_next([heavy, later], factors, now=3000.0) == heavy
    assert pick_next([], factors, now=0.0) is None


def test_nothing_waits_forever_against_a_stream_of_fresh_light_requests() -> None:
    factors = {"heavy": 2.0**-10, "light": 1.0}
    old = PendingView("old", "heavy", 8, submitted_at=0.0)
    served_at = None
    for minute in range(1, 24 * 60):
        now = minute * 60.0
        fresh = PendingView(f"l{minute}", "light", 1, submitted_at=now)
        if pick_next([old, fresh], factors, now) is old:
            served_at = now
            break
    assert served_at is not None and served_at <= HOUR + 60


def test_pick_next_agrees_with_order_pending() -> None:
    factors = {"a": 0.3, "b": 0.9, "c": 0.6}
    views = [
        PendingView(str(i), "abc"[i % 3], 1, submitted_at=float(i * 97 % 1000)) for i in range(50)
    ]
    assert pick_next(views, factors, now=5000.0) == order_pending(views, factors, now=5000.0)[0]
    assert priority(0.5, 0.0, HOUR) == pytest.approx(1.5)


def test_token_bucket_admits_a_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3)
    state = None
    allowed = []
    for _ in range(4):
        admission = bucket.take(state, now=100.0)
        allowed.append(admission.allowed)
        state = admission.state
    assert allowed == [True, True, True, False]
    assert admission.retry_after_s == pytest.approx(0.5)
    assert bucket.take(state, now=100.4).allowed is False
    assert bucket.take(state, now=100.5).allowed is True
    # Refill is capped at the burst size.
    assert bucket.take(state, now=10_000.0).state.tokens == pytest.approx(2.0)


def test_token_bucket_ignores_a_clock_going_backwards() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=1)
    state = bucket.take(None, now=50.0).state
    refused = bucket.take(state, now=10.0)
    assert not refused.allowed and refused.state.updated_at == 50.0
    assert math.isinf(bucket.take(state, now=50.0, cost=5).retry_after_s)
