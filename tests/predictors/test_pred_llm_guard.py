"""Rate limit, cost cap and back-off, in virtual time."""

from __future__ import annotations

from predictors.llm_guard import CallGuard

NOW = 1_704_067_200.0  # a UTC midnight


def test_rolling_hour_rate_limit() -> None:
    guard = CallGuard(calls_per_hour=2, usd_per_day=None)
    for at in (NOW, NOW + 10):
        assert guard.refusal(at) is None
        guard.record_request(at)
    assert guard.refusal(NOW + 3599) == "rate_capped"
    assert guard.refusal(NOW + 3600) is None  # the first request left the window
    assert guard.requests_last_hour(NOW + 3600) == 1


def test_zero_calls_per_hour_means_no_calls() -> None:
    assert CallGuard(calls_per_hour=0, usd_per_day=None).refusal(NOW) == "rate_capped"
    assert CallGuard(calls_per_hour=None, usd_per_day=None).refusal(NOW) is None


def test_daily_cap_with_expected_cost_and_utc_reset() -> None:
    guard = CallGuard(calls_per_hour=None, usd_per_day=1.0)
    guard.record_spend(NOW + 100, 0.4)
    assert guard.refusal(NOW + 200) is None  # 0.4 + 0.4 <= 1.0
    guard.record_spend(NOW + 200, 0.4)
    assert guard.refusal(NOW + 300) == "budget_exhausted"  # 0.8 + 0.4 > 1.0
    assert guard.spent_today(NOW + 300) == 0.8
    assert guard.refusal(NOW + 86_400) is None
    assert guard.spent_today(NOW + 86_400) == 0.0


def test_back_off_only_grows() -> None:
    guard = CallGuard(calls_per_hour=None, usd_per_day=None)
    guard.back_off(NOW + 600)
    guard.back_off(NOW + 300)
    assert guard.refusal(NOW + 599) == "backing_off"
    assert guard.refusal(NOW + 600) is None
