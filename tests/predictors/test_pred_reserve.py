"""The adaptive warm reserve: which reserve pays on a user's record, and what it asks for."""

from __future__ import annotations

import math

import pytest

from predictors.reserve import Sample, WarmReserve, choose_reserve

LEAD = 120.0


def _steady(n: int = 20, gap: float = 60.0, demand: int = 2) -> list[Sample]:
    # A user submitting a 1-GPU job every `gap` seconds: `demand` GPUs within a warm-up.
    return [Sample(gap, demand, 1.0, lapse_s=0.0) for _ in range(n)]


def test_a_steady_submitter_gets_a_reserve_of_its_demand_within_a_warm_up() -> None:
    choice = choose_reserve(_steady(), lead_s=LEAD, price=0.01, windows=(300.0,))
    assert choice is not None and (choice.gpus, choice.window_s) == (2, 300.0)
    # 20 submits served, 120 s saved each; 2 GPUs idle 60 s before each, less the warm-up
    # of each served job's GPU (reactive would idle that too): no extra idle at all.
    assert choice.value == pytest.approx(20 * 120.0 - 0.01 * (2 * 20 * 60 - 20 * 120))
    assert choose_reserve(_steady(), lead_s=LEAD, price=0.01, windows=(30.0,)) is None


def test_no_reserve_when_idle_costs_more_than_the_warm_ups_it_saves() -> None:
    # Two submits an hour apart: 2 GPUs x 3600 s x price 1 dwarfs 120 s saved per submit.
    samples = [Sample(3600.0, 1, 1.0, lapse_s=3480.0) for _ in range(10)]
    assert choose_reserve(samples, lead_s=LEAD, price=1.0) is None
    assert choose_reserve(samples, lead_s=LEAD, price=1e-4) is not None


def test_a_dearer_price_never_buys_a_larger_reserve() -> None:
    samples = [
        Sample(30.0 * (1 + i % 7), 1 + i % 5, 1.0, lapse_s=float(i % 3) * 200) for i in range(60)
    ]
    sizes = []
    for price in (1e-4, 1e-3, 1e-2, 1e-1, 1.0):
        choice = choose_reserve(samples, lead_s=LEAD, price=price)
        sizes.append(0 if choice is None else choice.gpus)
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > sizes[-1]


def test_what_the_forecast_already_had_warm_is_not_credited_to_the_reserve() -> None:
    covered = [Sample(60.0, 2, 1.0, held=2, warm=2, lapse_s=0.0) for _ in range(20)]
    assert choose_reserve(covered, lead_s=LEAD, price=1e-4) is None
    # Held but still warming: the reserve would serve them, and the held GPUs cost it nothing.
    warming = [Sample(60.0, 2, 1.0, held=2, warm=0, lapse_s=0.0) for _ in range(20)]
    choice = choose_reserve(warming, lead_s=LEAD, price=1.0, windows=(300.0,))
    assert choice is not None and choice.gpus == 2


def test_a_clump_after_a_long_quiet_is_not_served_by_a_short_window() -> None:
    # The clump's jobs come in the same second, but the user was quiet for an hour before:
    # a reserve up for 30 minutes after each submit was down when the clump began.
    clump = [Sample(0.0, k, 1.0, lapse_s=3600.0) for k in range(2, 10)]
    assert choose_reserve(clump, lead_s=LEAD, price=1e-6, windows=(1800.0,)) is None
    wide = choose_reserve(clump, lead_s=LEAD, price=1e-6, windows=(1800.0, 7200.0))
    assert wide is not None and wide.window_s == 7200.0


def test_windows_and_sizes_come_from_the_candidates_and_the_cap() -> None:
    samples = [Sample(100.0, 40, 1.0, lapse_s=0.0) for _ in range(10)]
    assert choose_reserve(samples, lead_s=LEAD, price=1e-6, max_gpus=32) is None
    choice = choose_reserve(samples, lead_s=LEAD, price=1e-6, windows=(600.0,), max_gpus=64)
    assert choice is not None and (choice.gpus, choice.window_s) == (40, 600.0)


def _feed(reserve: WarmReserve, user: str, times: list[float], gpus: int = 1) -> None:
    for t in times:
        reserve.observe_arrival(user, t, gpus)


def test_the_reserve_follows_the_users_record_and_lapses_after_its_window() -> None:
    reserve = WarmReserve(lead_s=LEAD, price=0.01, windows=(300.0, 3600.0), min_samples=8)
    times = [60.0 * i for i in range(8)]
    _feed(reserve, "a", times)
    assert reserve.plan("a", times[-1]) is None  # 7 gaps: too little record
    _feed(reserve, "a", [480.0])
    plan = reserve.plan("a", 480.0)
    # Every submit came 60 s after the one before: two 1-GPU jobs within a warm-up.
    assert plan == (2, 480.0 + 300.0)
    assert reserve.plan("a", 480.0 + 301.0) is None
    assert reserve.plan("b", 480.0) is None


def test_the_first_submit_is_never_served_and_records_no_sample() -> None:
    reserve = WarmReserve(lead_s=LEAD, min_samples=1)
    reserve.observe_arrival("a", 0.0, 4)
    assert reserve.plan("a", 0.0) is None
    reserve.observe_arrival("a", 10.0, 4)
    # One sample: its user had never submitted before the warm-up began (lapse infinite).
    state = reserve._users["a"]
    assert len(state.samples) == 1 and math.isinf(state.samples[0].lapse_s)
    assert state.samples[0].demand == 8


def test_a_forecast_that_holds_enough_warm_leaves_no_reserve() -> None:
    reserve = WarmReserve(lead_s=LEAD, price=1e-4, min_samples=4)
    for i in range(10):
        t = 60.0 * i
        reserve.observe_arrival("a", t, 1)
        # The forecast keeps the ending jobs' GPUs (warm at once): two, as many as come.
        reserve.note_forecast("a", t, 2, warm=True)
    assert reserve.plan("a", 540.0) is None


def test_new_holds_count_as_warm_only_a_warm_up_after_they_were_asked_for() -> None:
    reserve = WarmReserve(lead_s=LEAD)
    reserve.observe_arrival("a", 0.0, 1)
    reserve.note_forecast("a", 0.0, 3)
    reserve.observe_arrival("a", 60.0, 1)  # the 3 GPUs are still warming
    reserve.observe_arrival("a", 130.0, 1)  # warm by now
    first, second = reserve._users["a"].samples
    assert (first.held, first.warm) == (3, 0)
    assert (second.held, second.warm) == (3, 3)
    kept = WarmReserve(lead_s=LEAD)
    kept.observe_arrival("a", 0.0, 1)
    kept.note_forecast("a", 0.0, 3, warm=True)
    kept.observe_arrival("a", 60.0, 1)
    assert kept._users["a"].samples[0].warm == 3


def test_a_new_price_is_taken_at_once_and_per_user_prices_override() -> None:
    reserve = WarmReserve(lead_s=LEAD, price=1e-4, windows=(300.0,), refresh_jobs=100)
    times = [60.0 * i for i in range(12)]
    _feed(reserve, "a", times)
    _feed(reserve, "b", times)
    assert reserve.plan("a", times[-1]) is not None
    reserve.price = 100.0
    assert reserve.plan("a", times[-1]) is None
    reserve.user_prices["b"] = 1e-4
    assert reserve.plan("b", times[-1]) is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lead_s": 0.0}, "lead_s and price must be positive"),
        ({"price": -1.0}, "lead_s and price must be positive"),
        ({"min_samples": 0}, "at least 1"),
        ({"max_gpus": 0}, "at least 1"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WarmReserve(**kwargs)  # type: ignore[arg-type]
