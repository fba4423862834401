"""The idle-budget controller: the price rises when idle runs over budget and falls under it."""

from __future__ import annotations

import pytest

from predictors.budget import BudgetController, TenantBudgets, Totals


def _feed(ctl: BudgetController, ratio: float, steps: int, step_s: float = 3600.0) -> list[float]:
    """Hourly totals where each hour is 100 busy GPU-hours and `ratio` x that extra idle."""
    prices = []
    busy = idle = 0.0
    for i in range(steps):
        busy += 360_000.0
        idle += 360_000.0 * ratio
        prices.append(ctl.update(Totals(i * step_s, busy, idle, 0.0)))
    return prices


def test_over_budget_raises_the_price_under_budget_lowers_it() -> None:
    over = BudgetController(0.05, price=0.01)
    prices = _feed(over, 0.2, 6)
    assert prices[0] == 0.01  # one sample: no window yet
    assert prices == sorted(prices) and prices[-1] > 0.01
    under = BudgetController(0.05, price=0.01)
    prices = _feed(under, 0.0, 6)
    assert prices == sorted(prices, reverse=True) and prices[-1] < 0.01


def test_the_ratio_is_over_the_sliding_window_and_counts_only_idle_above_reactive() -> None:
    ctl = BudgetController(0.05, window_s=7200.0)
    ctl.update(Totals(0.0, 0.0, 0.0, 0.0))
    ctl.update(Totals(3600.0, 360_000.0, 90_000.0, 72_000.0))
    assert ctl.ratio() == pytest.approx(0.05)
    ctl.update(Totals(7200.0, 720_000.0, 90_000.0, 144_000.0))
    ctl.update(Totals(10_800.0, 1_080_000.0, 90_000.0, 144_000.0))
    # The first sample fell out of the window: the last two hours had no extra idle at all.
    assert ctl.ratio() == pytest.approx((0.0 - 72_000.0) / 720_000.0)


def test_the_price_stays_within_its_bounds() -> None:
    ctl = BudgetController(0.05, price=0.5, max_price=0.6)
    assert max(_feed(ctl, 5.0, 20)) == 0.6
    low = BudgetController(0.05, price=0.001, min_price=0.0005)
    assert min(_feed(low, 0.0, 40)) == 0.0005


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": -0.1}, "budget must not be negative"),
        ({"window_s": 0}, "window_s must be positive"),
        ({"price": 200.0}, "price must lie in"),
        ({"target": 1.5}, "target must be in"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BudgetController(**kwargs)  # type: ignore[arg-type]


def test_a_tenant_pays_the_higher_of_its_own_and_the_cluster_price() -> None:
    budgets = TenantBudgets(0.05, price=0.01)
    heavy = budgets.for_tenant("heavy", budget=0.01)
    _feed(heavy, 0.2, 4)
    assert budgets.price("heavy") == heavy.price > 0.01
    assert budgets.price("light") == budgets.cluster.price == 0.01
