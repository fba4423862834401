"""Value types, the history builder's features, and the context snapshot."""

from __future__ import annotations

import math

import pytest
from pred_helpers import DAY, HOUR, T0, builder_with, cue, finish, start, submit, submits_at

from predictors import ALL_USERS, Cost, Forecast, HistoryBuilder, HistoryConfig, build_context


def test_forecast_rejects_impossible_values() -> None:
    with pytest.raises(ValueError):
        Forecast(10.0, 5.0, 1, 0.5, "x")
    with pytest.raises(ValueError):
        Forecast(0.0, 5.0, 0, 0.5, "x")
    with pytest.raises(ValueError):
        Forecast(0.0, 5.0, 1, 1.5, "x")
    with pytest.raises(ValueError):
        Forecast(0.0, math.inf, 1, 0.5, "x")


def test_forecast_covers_window_size_and_model() -> None:
    f = Forecast(100.0, 200.0, 4, 0.5, "x", gpu_model="A100")
    assert f.covers(100.0, 4) and f.covers(200.0, 1, "A100")
    assert not f.covers(99.0, 1)
    assert not f.covers(150.0, 8)
    assert not f.covers(150.0, 1, "V100")
    assert f.window_s == 100.0


def test_cost_adds_up() -> None:
    total = Cost(10, 20, 0.5) + Cost(1, 2, 0.25)
    assert total == Cost(11, 22, 0.75)
    assert total.tokens == 33


def test_gaps_idle_gaps_and_k_step_gaps() -> None:
    events = [
        submit(T0, job="a"),
        submit(T0 + 100, job="b"),
        finish(T0 + 150, job="a"),
        submit(T0 + 400, job="c"),
        submit(T0 + 1000, job="d"),
    ]
    h = builder_with(*events).history("alice")
    assert h.gaps.values() == [100, 300, 600]
    # Idle gaps run from the latest activity: the finish at +150 shortens the second one.
    assert h.idle_gaps.values() == [100, 250, 600]
    assert h.kgap_window(2).values() == [400, 900]
    assert h.kgap_window(3).values() == [1000]
    assert h.last_submit_at == T0 + 1000 and h.last_activity_at == T0 + 1000
    assert h.n_jobs == 4


def test_open_jobs_durations_and_duplicate_sources() -> None:
    events = [
        submit(T0, gpus=8, job="j1"),
        submit(T0 + 5, gpus=8, job="j1"),  # the same submit seen by a second source
        start(T0 + 60, gpus=8, job="j1"),
        start(T0 + 70, gpus=2, job="j2"),  # a source that only reports starts
        finish(T0 + 560, job="j1"),
    ]
    h = builder_with(*events).history("alice")
    assert h.n_jobs == 2
    assert h.open_jobs == 1 and h.open_gpus == 2
    # Duration runs from the start, not the submit.
    assert h.durations.values() == [500]
    assert h.last_finish_at == T0 + 560


def test_open_jobs_are_bounded() -> None:
    config = HistoryConfig(max_open_jobs=3)
    h = builder_with(*(submit(T0 + i, job=f"j{i}") for i in range(5)), config=config).history(
        "alice"
    )
    assert h.open_jobs == 3 and h.open_gpus == 3


def test_sizes() -> None:
    h = builder_with(*submits_at([0, 1, 2], gpus=8), submit(T0 + 3, gpus=1)).history("alice")
    assert h.typical_size("last") == 1
    assert h.typical_size("mode") == 8
    assert h.typical_size("max") == 8
    assert h.max_gpus == 8
    assert HistoryBuilder().history("nobody").typical_size() == 1


def test_out_of_order_submit_adds_no_negative_gap() -> None:
    h = builder_with(submit(T0 + 100), submit(T0 + 50)).history("alice")
    assert h.gaps.values() == []
    assert h.n_jobs == 2 and h.last_submit_at == T0 + 100


def test_season_marks_count_days_not_jobs() -> None:
    # Monday 09:10 and 09:20, Tuesday 09:05, Saturday 09:00.
    events = submits_at([9 * HOUR + 600, 9 * HOUR + 1200, DAY + 9 * HOUR + 300, 5 * DAY + 9 * HOUR])
    h = builder_with(*events).history("alice")
    assert h.season_active[0][9] == 2  # two weekdays
    assert h.season_active[1][9] == 1  # one weekend day
    assert h.hod_jobs[9] == 4
    assert h.dow_jobs[0] == 2 and h.dow_jobs[1] == 1 and h.dow_jobs[5] == 1


def test_utc_offset_moves_the_day_and_hour() -> None:
    config = HistoryConfig(utc_offset_s=2 * HOUR)
    h = builder_with(submit(T0 + 23 * HOUR), config=config).history("alice")
    # 23:00 UTC Monday is 01:00 Tuesday local.
    assert h.season_active[0][1] == 1
    assert h.dow_jobs[1] == 1


def test_ewma_rate_is_jobs_per_second() -> None:
    h = builder_with(submit(T0)).history("alice")
    jobs_rate, gpus_rate = h.ewma[600.0].rates_at(T0 + 600)
    assert jobs_rate == pytest.approx(math.log(2) / 600 / 2)
    assert gpus_rate == pytest.approx(jobs_rate)


def test_cues_resolve_on_the_next_arrival() -> None:
    events = [cue(T0, "preprocessing_done"), submit(T0 + 120), cue(T0 + 9000, "preprocessing_done")]
    h = builder_with(*events).history("alice")
    assert h.cue_seen["preprocessing_done"] == 2
    assert h.cue_hits["preprocessing_done"] == 1
    assert h.cue_lags["preprocessing_done"].values() == [120]
    assert h.cue_pending == {"preprocessing_done": T0 + 9000}


def test_cue_followed_too_late_is_not_a_hit() -> None:
    config = HistoryConfig(cue_max_lag_s=600)
    h = builder_with(cue(T0, "training_done"), submit(T0 + 601), config=config).history("alice")
    assert h.cue_hits.get("training_done", 0) == 0
    assert h.cue_pending == {}


def test_aggregate_history_sees_every_user() -> None:
    builder = builder_with(
        submit(T0, "alice", job="1"),
        submit(T0 + 10, "bob", job="1"),
        finish(T0 + 20, "alice", job="1"),
        config=HistoryConfig(aggregate=True),
    )
    total = builder.history(ALL_USERS)
    assert total.n_jobs == 2
    # Same job id for two users stays two jobs in the aggregate.
    assert total.open_jobs == 1
    assert builder.users() == [ALL_USERS, "alice", "bob"]


def test_context_snapshot_and_new_events() -> None:
    builder = HistoryBuilder(HistoryConfig(max_events=3))
    builder.observe_all(submits_at([0, 1, 2, 3]))
    ctx = builder.context("alice", T0 + 10)
    assert ctx.seq == 4 and len(ctx.events) == 3
    assert [e.at for e in ctx.new_events(2)] == [T0 + 2, T0 + 3]
    assert ctx.new_events(4) == ()
    assert len(ctx.new_events(0)) == 3  # older ones fell out of the snapshot
    builder.observe(submit(T0 + 4))
    assert ctx.seq == 4  # a context is a snapshot of the count


def test_build_context_sorts_events() -> None:
    ctx = build_context([submit(T0 + 100), submit(T0)], "alice", T0 + 200)
    assert ctx.history.gaps.values() == [100]
    assert ctx.user == "alice" and ctx.at == T0 + 200


def test_history_config_checks() -> None:
    with pytest.raises(ValueError):
        HistoryConfig(season_bin_s=7000)
    with pytest.raises(ValueError):
        HistoryConfig(max_k=0)
