"""The steady controller: one price that meets the idle budget over its window, found from how
idle answers to price, held steady through quiet and busy days."""

from __future__ import annotations

from functools import partial

import pytest

from predictors.budget import BudgetController, SteadyController, TenantBudgets, Totals

HOUR = 3600.0


def _world(ctl: BudgetController | SteadyController, days: int, elasticity: float) -> list[float]:
    """Hourly totals of a cluster whose days alternate: a busy day (100 busy GPU-hours an
    hour) and a quiet one (20). What pre-warming idles in an hour answers to the price in
    force as a power law, idle = level x price ** -elasticity, with a level that does not
    follow the busy time (a quiet day's users come and go as often, with fewer GPUs busy)."""
    prices = []
    busy = idle = 0.0
    for hour in range(days * 24):
        quiet = (hour // 24) % 2 == 1
        busy += (20.0 if quiet else 100.0) * HOUR
        idle += 0.05 * HOUR * ctl.price**-elasticity
        prices.append(ctl.update(Totals(hour * HOUR, busy, idle, 0.0)))
    return prices


def test_it_finds_the_steady_price_that_meets_the_budget_and_holds_it() -> None:
    # A four-day window holds two busy and two quiet days, 60 busy GPU-hours an hour on
    # average; 0.95 x 0.05 of it is 2.85 idle GPU-hours an hour, reached at 0.05 / 2.85.
    steady = SteadyController(0.05, window_s=4 * 24 * HOUR, price=0.2, elasticity=1.0)
    prices = _world(steady, 28, elasticity=1.0)
    wanted = 0.05 / (0.95 * 0.05 * 60.0)
    last_week = prices[-7 * 24 :]
    assert max(last_week) == pytest.approx(wanted, rel=0.1)
    assert min(last_week) == pytest.approx(wanted, rel=0.1)
    # The day-by-day controller chases each day's ratio instead: its price swings with the
    # days, several times over.
    daily = BudgetController(0.05, price=0.2)
    swings = _world(daily, 28, elasticity=1.0)[-7 * 24 :]
    assert max(swings) / min(swings) > 3.0


def test_a_wrong_elasticity_still_settles_near_the_price() -> None:
    # Idle answers half as strongly as the controller assumes: the estimate is off while the
    # window still holds periods at other prices, then settles once it holds only its own.
    steady = SteadyController(0.05, window_s=4 * 24 * HOUR, price=0.2, elasticity=1.0)
    prices = _world(steady, 28, elasticity=0.5)
    wanted = (0.05 / (0.95 * 0.05 * 60.0)) ** 2
    assert prices[-1] == pytest.approx(wanted, rel=0.2)


def test_it_keeps_its_start_price_until_the_window_holds_enough_work() -> None:
    steady = SteadyController(0.05, price=0.02, min_busy_gpu_s=10 * HOUR)
    assert steady.update(Totals(0.0, 0.0, 0.0, 0.0)) == 0.02
    assert steady.update(Totals(HOUR, 5 * HOUR, 50 * HOUR, 0.0)) == 0.02
    assert steady.ratio() is None and steady.updates == 0
    assert steady.update(Totals(2 * HOUR, 10 * HOUR, 100 * HOUR, 0.0)) > 0.02
    assert steady.ratio() == pytest.approx(10.0)


def test_one_odd_period_moves_the_price_at_most_one_step() -> None:
    steady = SteadyController(0.05, price=0.01, max_step=2.0)
    assert steady.add_period(at=HOUR, extra_idle_gpu_s=1e9, busy_gpu_s=HOUR * 10) == 0.02
    assert steady.add_period(at=2 * HOUR, extra_idle_gpu_s=-1e9, busy_gpu_s=HOUR * 10) == 0.01
    # Extra idle below reactive's over the whole window: the price only falls, a step a time.
    assert steady.add_period(at=3 * HOUR, extra_idle_gpu_s=-1.0, busy_gpu_s=HOUR * 10) == 0.005


def test_periods_leave_the_window_and_the_price_stays_within_bounds() -> None:
    steady = SteadyController(0.05, window_s=2 * HOUR, price=0.5, max_price=0.6)
    steady.add_period(at=HOUR, extra_idle_gpu_s=1e9, busy_gpu_s=HOUR)
    assert steady.price == 0.6
    steady.add_period(at=2 * HOUR, extra_idle_gpu_s=0.0, busy_gpu_s=HOUR)
    steady.add_period(at=3 * HOUR, extra_idle_gpu_s=0.0, busy_gpu_s=HOUR)
    assert steady.ratio() == 0.0  # the first period left the two-hour window


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": -0.1}, "budget must not be negative"),
        ({"window_s": 0}, "window_s must be positive"),
        ({"price": 200.0}, "price must lie in"),
        ({"elasticity": 0.0}, "elasticity must be positive"),
        ({"max_step": 1.0}, "max_step above 1"),
        ({"target": 0.0}, "target must be in"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SteadyController(**kwargs)  # type: ignore[arg-type]


def test_tenants_get_steady_controllers_of_their_own_budget() -> None:
    budgets = TenantBudgets(0.05, make=partial(SteadyController, price=0.01))
    heavy = budgets.for_tenant("heavy", budget=0.01)
    assert isinstance(heavy, SteadyController) and heavy.budget == 0.01
    heavy.add_period(at=HOUR, extra_idle_gpu_s=HOUR * 100, busy_gpu_s=HOUR * 10)
    assert budgets.price("heavy") == heavy.price > 0.01
    assert budgets.price("light") == budgets.cluster.price == 0.01


def test_a_period_is_kept_with_the_price_actually_paid() -> None:
    steady = SteadyController(0.05, price=0.01)
    steady.add_period(at=HOUR, extra_idle_gpu_s=0.0, busy_gpu_s=HOUR, spent_at=0.04)
    steady.update(Totals(HOUR, 0.0, 0.0, 0.0))
    steady.update(Totals(2 * HOUR, HOUR, 0.0, 0.0), spent_at=0.03)
    assert [p[3] for p in steady.periods] == [0.04, 0.03]
