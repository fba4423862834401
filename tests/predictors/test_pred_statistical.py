"""Statistical predictors on hand-made histories with known answers."""

from __future__ import annotations

import math

import pytest
from pred_helpers import DAY, HOUR, T0, builder_with, cue, finish, submit, submits_at

from predictors import (
    BurstPredictor,
    CuePredictor,
    CuePrior,
    EwmaPredictor,
    HistogramPredictor,
    HistoryBuilder,
    HistoryConfig,
    SeasonalityPredictor,
)

# -- burst continuation -------------------------------------------------------------------

BURST = submits_at([0, 100, 200, 5000], gpus=4)  # idle gaps 100, 100, 4800


def test_burst_confidence_is_the_users_own_record() -> None:
    ctx = builder_with(*BURST).context("alice", T0 + 5000)
    [f] = BurstPredictor(prior_weight=0).predict(ctx, T0 + 5000)
    assert f.confidence == pytest.approx(2 / 3)
    assert (f.start_at, f.end_at) == (T0 + 5000, T0 + 5600)
    assert f.gpu_count == 4 and f.predictor == "burst" and f.user == "alice"


def test_burst_conditions_on_time_already_elapsed() -> None:
    ctx = builder_with(*BURST).context("alice", T0 + 5300)
    [f] = BurstPredictor(prior_weight=0).predict(ctx, T0 + 5300)
    # Of the gaps that lasted 300 s (only the 4800 s one), none ended by 600 s.
    assert f.confidence == 0.0
    [shrunk] = BurstPredictor(prior=0.69, prior_weight=4).predict(ctx, T0 + 5300)
    # Timing: 0 of 1 with the prior as 4 trials; size: 3 of 3 repeats with a 0.9 prior.
    assert shrunk.confidence == pytest.approx(0.69 * 4 / 5 * (3 + 0.9 * 4) / 7)


def test_burst_window_ends_and_min_confidence_filters() -> None:
    ctx = builder_with(*BURST).context("alice", T0 + 5600)
    assert BurstPredictor().predict(ctx, T0 + 5600) == []
    ctx = builder_with(*BURST).context("alice", T0 + 5000)
    assert BurstPredictor(prior_weight=0, min_confidence=0.7).predict(ctx, T0 + 5000) == []


def test_burst_anchors_on_a_finish_too() -> None:
    events = [submit(T0, job="a"), finish(T0 + 3000, job="a")]
    ctx = builder_with(*events).context("alice", T0 + 3100)
    [f] = BurstPredictor(window_s=600).predict(ctx, T0 + 3100)
    assert f.end_at == T0 + 3600
    # No record yet: the priors alone (timing 0.69, the next job no larger 0.9).
    assert f.confidence == pytest.approx(0.69 * 0.9)


def test_burst_forecasts_the_kth_job_of_a_burst() -> None:
    ctx = builder_with(*BURST).context("alice", T0 + 5000)
    forecasts = BurstPredictor(prior_weight=0, max_jobs=3).predict(ctx, T0 + 5000)
    # 2-step gaps 200 and 4900: one of the two fits where two of three 1-step gaps fit.
    assert [f.confidence for f in forecasts] == pytest.approx([2 / 3, 2 / 3 * 0.5])
    assert "job 2" in forecasts[1].rationale


def test_burst_confidence_counts_on_the_size_too() -> None:
    growing = [submit(T0 + i * 60, gpus=g) for i, g in enumerate([1, 2, 4, 8, 2])]
    ctx = builder_with(*growing).context("alice", T0 + 240)
    [f] = BurstPredictor(prior_weight=0).predict(ctx, T0 + 240)
    # Every gap fit the window, but only 1 of 4 jobs was no larger than the one before.
    assert f.gpu_count == 2 and f.confidence == 0.25
    # The recent maximum would have served all of them.
    [f] = BurstPredictor(prior_weight=0, size="max").predict(ctx, T0 + 240)
    assert f.gpu_count == 8 and f.confidence == 1.0


def test_burst_needs_a_job() -> None:
    assert BurstPredictor().predict(HistoryBuilder().context("alice", T0), T0) == []
    with pytest.raises(ValueError):
        BurstPredictor(window_s=0)
    with pytest.raises(ValueError):
        BurstPredictor(size="median")


# -- histogram ----------------------------------------------------------------------------

GAPS = [60, 60, 120, 120, 180, 180, 240, 240, 300, 3000]


def _regular(gaps: list[float]) -> list:
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    return submits_at(offsets, gpus=2)


def test_histogram_window_is_between_percentiles() -> None:
    events = _regular(GAPS)
    anchor = events[-1].at
    predictor = HistogramPredictor(0.1, 0.8, margin=0.0, min_samples=5, prior_weight=0)
    [f] = predictor.predict(builder_with(*events).context("alice", anchor), anchor)
    assert (f.start_at, f.end_at) == (anchor + 60, anchor + 240)
    assert f.confidence == pytest.approx(0.8)
    assert f.gpu_count == 2 and "histogram" in f.rationale


def test_histogram_margin_widens_the_window() -> None:
    events = _regular(GAPS)
    anchor = events[-1].at
    predictor = HistogramPredictor(0.1, 0.8, margin=0.5, min_samples=5)
    [f] = predictor.predict(builder_with(*events).context("alice", anchor), anchor)
    assert (f.start_at, f.end_at) == (anchor + 30, anchor + 360)


def test_histogram_starts_now_once_inside_the_window() -> None:
    events = _regular(GAPS)
    now = events[-1].at + 100
    predictor = HistogramPredictor(0.1, 0.8, margin=0.0, min_samples=5, prior_weight=0)
    [f] = predictor.predict(builder_with(*events).context("alice", now), now)
    assert f.start_at == now
    # Gaps that lasted 100 s: 120..3000 (8 of them); ending by 240: 120, 120, 180, 180, 240, 240.
    assert f.confidence == pytest.approx(6 / 8)


def test_histogram_falls_back_when_not_representative() -> None:
    few = _regular([60, 60])
    anchor = few[-1].at
    predictor = HistogramPredictor(min_samples=5, fallback_window_s=900)
    [f] = predictor.predict(builder_with(*few).context("alice", anchor), anchor)
    assert (f.start_at, f.end_at) == (anchor, anchor + 900)
    assert "fallback" in f.rationale
    # Mostly gaps beyond the range: also not representative.
    long_gaps = _regular([20000.0] * 8 + [60.0] * 2)
    anchor = long_gaps[-1].at
    [f] = predictor.predict(builder_with(*long_gaps).context("alice", anchor), anchor)
    assert f.end_at == anchor + 900


def test_histogram_caps_the_window() -> None:
    events = _regular([7000.0] * 10)
    anchor = events[-1].at
    predictor = HistogramPredictor(0.05, 0.9, min_samples=5, max_window_s=4 * HOUR)
    [f] = predictor.predict(builder_with(*events).context("alice", anchor), anchor)
    assert f.end_at == anchor + 7700  # 7000 x 1.1
    predictor = HistogramPredictor(0.05, 0.9, min_samples=5, max_window_s=7200)
    [f] = predictor.predict(builder_with(*events).context("alice", anchor), anchor)
    assert f.end_at == anchor + 7200


def test_histogram_on_submit_gaps() -> None:
    events = [*_regular([100] * 9), finish(T0 + 950)]
    now = T0 + 950
    idle = HistogramPredictor(0.0, 1.0, margin=0.0, min_samples=5)
    submit_gaps = HistogramPredictor(0.0, 1.0, margin=0.0, min_samples=5, gaps="submit")
    ctx = builder_with(*events).context("alice", now)
    # Every gap is 100 s: the window opens 100 s after the anchor and lasts min_window_s.
    assert idle.predict(ctx, now)[0].start_at == T0 + 950 + 100
    assert submit_gaps.predict(ctx, now)[0].start_at == T0 + 900 + 100
    assert submit_gaps.predict(ctx, now)[0].end_at == T0 + 900 + 160


# -- seasonality --------------------------------------------------------------------------


def _workweek(days: list[int], minute: int = 15) -> list:
    return submits_at([d * DAY + 9 * HOUR + minute * 60 for d in days])


def test_seasonality_forecasts_the_usual_hour() -> None:
    events = _workweek([0, 1, 2, 3, 4, 7])  # Mon-Fri, then next Monday
    now = T0 + 8 * DAY + 8 * HOUR + 1800  # Tuesday, week 2, 08:30
    ctx = builder_with(*events).context("alice", now)
    [f] = SeasonalityPredictor(prior_weight=0).predict(ctx, now)
    assert (f.start_at, f.end_at) == (T0 + 8 * DAY + 9 * HOUR, T0 + 8 * DAY + 10 * HOUR)
    assert f.confidence == 1.0
    [shrunk] = SeasonalityPredictor(prior_weight=2).predict(ctx, now)
    # Prior: 6 active bins out of 6 weekdays x 24 bins.
    assert shrunk.confidence == pytest.approx((6 + 2 / 24) / 8)


def test_seasonality_splits_weekends() -> None:
    events = _workweek([0, 1, 2, 3, 4])
    now = T0 + 5 * DAY + 8 * HOUR + 1800  # Saturday 08:30: no weekend day observed yet
    ctx = builder_with(*events).context("alice", now)
    assert SeasonalityPredictor(prior_weight=0).predict(ctx, now) == []
    [f] = SeasonalityPredictor(prior_weight=0, split_weekend=False).predict(ctx, now)
    assert f.confidence == 1.0


def test_seasonality_skips_a_bin_already_active_today() -> None:
    events = [*_workweek([0, 1, 2]), submit(T0 + 3 * DAY + 9 * HOUR + 60)]
    now = T0 + 3 * DAY + 9 * HOUR + 120
    ctx = builder_with(*events).context("alice", now)
    assert SeasonalityPredictor(horizon_s=600, prior_weight=0).predict(ctx, now) == []


def test_seasonality_scales_the_bin_under_way() -> None:
    events = _workweek([0, 2, 4])  # 3 of the 6 weekdays before next Tuesday
    now = T0 + 8 * DAY + 9 * HOUR + 1800  # Tuesday week 2, 09:30, nothing yet today
    ctx = builder_with(*events).context("alice", now)
    forecasts = SeasonalityPredictor(horizon_s=600, prior_weight=0, min_confidence=0).predict(
        ctx, now
    )
    [f] = forecasts
    assert f.start_at == now and f.end_at == T0 + 8 * DAY + 10 * HOUR
    assert f.confidence == pytest.approx(0.25 / 0.75)


def test_seasonality_uses_the_configured_bins() -> None:
    config = HistoryConfig(season_bin_s=900)
    events = submits_at([d * DAY + 9 * HOUR + 60 for d in (0, 1)])
    now = T0 + 2 * DAY + 9 * HOUR - 300
    ctx = builder_with(*events, config=config).context("alice", now)
    [f] = SeasonalityPredictor(horizon_s=600, prior_weight=0).predict(ctx, now)
    assert (f.start_at, f.end_at) == (T0 + 2 * DAY + 9 * HOUR, T0 + 2 * DAY + 9 * HOUR + 900)


# -- EWMA ---------------------------------------------------------------------------------


def test_ewma_poisson_confidence_from_decayed_rate() -> None:
    ctx = builder_with(submit(T0, gpus=8)).context("alice", T0 + 600)
    [f] = EwmaPredictor(half_life_s=600, horizon_s=600).predict(ctx, T0 + 600)
    mean = math.log(2) / 2
    assert f.confidence == pytest.approx(1 - math.exp(-mean))
    assert (f.start_at, f.end_at, f.gpu_count) == (T0 + 600, T0 + 1200, 8)


def test_ewma_several_jobs_and_volume() -> None:
    ctx = builder_with(*submits_at([0, 10, 20, 30], gpus=8)).context("alice", T0 + 30)
    forecasts = EwmaPredictor(half_life_s=600, horizon_s=600, max_jobs=3).predict(ctx, T0 + 30)
    assert len(forecasts) == 3
    confidences = [f.confidence for f in forecasts]
    assert confidences == sorted(confidences, reverse=True)
    [pool] = EwmaPredictor(half_life_s=600, horizon_s=600, mode="volume").predict(ctx, T0 + 30)
    _, gpus_rate = ctx.history.ewma[600.0].rates_at(T0 + 30)
    assert pool.gpu_count == math.ceil(gpus_rate * 600)
    assert pool.gpu_count > 8


def test_ewma_needs_a_tracked_half_life() -> None:
    ctx = builder_with(submit(T0)).context("alice", T0)
    with pytest.raises(ValueError, match="not tracked"):
        EwmaPredictor(half_life_s=123).predict(ctx, T0)


def test_ewma_fades_with_silence() -> None:
    ctx = builder_with(submit(T0)).context("alice", T0 + 7 * DAY)
    assert EwmaPredictor(min_confidence=0.01).predict(ctx, T0 + 7 * DAY) == []


# -- cues ---------------------------------------------------------------------------------


def test_cue_prior_before_any_record() -> None:
    ctx = builder_with(submit(T0 - 100), cue(T0, "preprocessing_done")).context("alice", T0 + 60)
    [f] = CuePredictor().predict(ctx, T0 + 60)
    assert (f.start_at, f.end_at) == (T0 + 60, T0 + 900)
    assert f.confidence == pytest.approx(0.6)


def test_cue_learns_the_users_lag() -> None:
    events = []
    for i, lag in enumerate([100, 200, 300]):
        base = T0 + i * 10_000
        events += [cue(base, "preprocessing_done"), submit(base + lag)]
    events.append(cue(T0 + 40_000, "preprocessing_done"))
    ctx = builder_with(*events).context("alice", T0 + 40_010)
    [f] = CuePredictor(prior_weight=0).predict(ctx, T0 + 40_010)
    assert (f.start_at, f.end_at) == (T0 + 40_100, T0 + 40_300)
    assert f.confidence == 1.0 and "learned" in f.rationale


def test_cue_ignores_unknown_old_and_answered_cues() -> None:
    events = [submit(T0), cue(T0, "weird_cue"), cue(T0, "training_done")]
    ctx = builder_with(*events).context("alice", T0 + 7200)
    assert CuePredictor(max_age_s=3600).predict(ctx, T0 + 7200) == []
    ctx = builder_with(cue(T0, "training_done"), submit(T0 + 10)).context("alice", T0 + 20)
    assert CuePredictor().predict(ctx, T0 + 20) == []
    priors = {"weird_cue": CuePrior(0, 60, 0.5)}
    ctx = builder_with(cue(T0, "weird_cue")).context("alice", T0 + 1)
    [f] = CuePredictor(priors).predict(ctx, T0 + 1)
    assert f.end_at == T0 + 60


# -- shared contract ----------------------------------------------------------------------

ALL = [
    BurstPredictor(max_jobs=2),
    HistogramPredictor(),
    SeasonalityPredictor(min_confidence=0),
    EwmaPredictor(max_jobs=2),
    CuePredictor(),
]


@pytest.mark.parametrize("predictor", ALL, ids=lambda p: p.name)
def test_deterministic_and_in_the_future(predictor) -> None:
    events = [*_workweek([0, 1, 2, 3, 4, 7]), cue(T0 + 7 * DAY + 9 * HOUR + 1000, "training_done")]
    now = T0 + 7 * DAY + 9 * HOUR + 1100
    ctx = builder_with(*events).context("alice", now)
    first = predictor.predict(ctx, now)
    assert first == predictor.predict(ctx, now)
    assert first, "each predictor has something to say about this history"
    for f in first:
        assert f.end_at > now and f.start_at >= now
        assert 0.0 <= f.confidence <= 1.0
        assert f.cost.usd == 0.0 and f.predictor == predictor.name


def test_seasonality_certain_bin_under_way_stays_a_probability() -> None:
    events = _workweek([0, 1, 2, 3, 4, 7])
    now = T0 + 8 * DAY + 9 * HOUR + 2722  # a remaining share that rounds badly
    ctx = builder_with(*events).context("alice", now)
    forecasts = SeasonalityPredictor(horizon_s=600, prior_weight=0).predict(ctx, now)
    assert [f.confidence for f in forecasts] == [1.0]
