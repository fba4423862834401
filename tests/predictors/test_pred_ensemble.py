"""The ensemble: per-user weights from the scored record, selection, and safe fallbacks."""

from __future__ import annotations

import pytest
from pred_helpers import T0, finish, submit

from predictors import BurstPredictor, Context, Ensemble, Forecast, HistoryBuilder


class Fixed:
    """A member that always forecasts the same offsets from now (a deliberately simple one)."""

    def __init__(self, name: str, lo: float, hi: float, gpus: int, conf: float) -> None:
        self.name, self.lo, self.hi, self.gpus, self.conf = name, lo, hi, gpus, conf
        self.calls = 0

    def predict(self, context: Context, now: float) -> list[Forecast]:
        self.calls += 1
        return [Forecast(now + self.lo, now + self.hi, self.gpus, self.conf, self.name)]


class Broken:
    name = "broken"

    def predict(self, context: Context, now: float) -> list[Forecast]:
        raise RuntimeError("boom")


class Expensive(Fixed):
    expensive = True


def stream(jobs: int):
    """A job every 120 s, each running 60 s: burst continuation's ideal user."""
    for i in range(jobs):
        at = T0 + 120 * i
        yield submit(at, job=f"j{i}")
        yield finish(at + 60, job=f"j{i}")


def drive(ensemble: Ensemble, jobs: int) -> list[list[Forecast]]:
    builder = HistoryBuilder()
    outputs = []
    for event in stream(jobs):
        builder.observe(event)
        outputs.append(ensemble.predict(builder.context("alice", event.at), event.at))
    return outputs


def never_hit() -> Fixed:
    # Windows 30-50 s after each event: jobs come at multiples of 120 s, never inside.
    return Fixed("bad", 30, 50, 8, 0.9)


def test_a_member_worse_than_the_baseline_loses_its_weight() -> None:
    ensemble = Ensemble(
        [BurstPredictor(), never_hit(), BurstPredictor(window_s=300, name="burst-300")],
        baseline="burst",
        min_jobs=5,
    )
    outputs = drive(ensemble, 12)
    assert any(f.predictor == "bad" for f in outputs[1])  # no record yet: it is heard
    assert ensemble.weights("alice") == {"burst": 1.0, "bad": 0.0, "burst-300": 1.0}
    assert all(f.predictor != "bad" for f in outputs[-1])
    bad = ensemble.record("alice", "bad")
    assert bad.recall == 0.0 and bad.idle_gpu_s > 0
    assert ensemble.record("alice", "burst").recall > 0.8


def test_weights_follow_each_user_separately() -> None:
    ensemble = Ensemble([BurstPredictor(), never_hit()], min_jobs=5)
    drive(ensemble, 12)
    assert ensemble.weights("bob") == {"burst": 1.0, "bad": 1.0}


def test_weighted_mode_keeps_the_more_confident_of_one_slot() -> None:
    low = Fixed("low", 0, 100, 1, 0.2)
    high = Fixed("high", 50, 150, 1, 0.8)
    other_size = Fixed("big", 0, 100, 4, 0.5)
    ensemble = Ensemble([low, high, other_size], calibrate=False)
    builder = HistoryBuilder()
    builder.observe(submit(T0))
    out = ensemble.predict(builder.context("alice", T0), T0)
    assert sorted((f.predictor, f.confidence) for f in out) == [("big", 0.5), ("high", 0.8)]


def test_select_mode_picks_the_best_record_and_falls_back() -> None:
    ensemble = Ensemble([never_hit(), BurstPredictor()], baseline="bad", mode="select", min_jobs=5)
    outputs = drive(ensemble, 12)
    assert {f.predictor for f in outputs[1]} == {"bad"}  # the baseline until records exist
    assert {f.predictor for f in outputs[-1]} == {"burst"}


def test_select_mode_survives_a_member_that_raises() -> None:
    ensemble = Ensemble([BurstPredictor(), Broken()], mode="select", min_jobs=0)
    outputs = drive(ensemble, 3)
    assert outputs[-1] and {f.predictor for f in outputs[-1]} == {"burst"}


def test_a_raising_member_never_reaches_the_caller() -> None:
    ensemble = Ensemble([Broken(), BurstPredictor()], baseline="burst")
    outputs = drive(ensemble, 3)
    assert all(f.predictor == "burst" for out in outputs for f in out)


def test_expensive_member_without_weight_is_only_probed() -> None:
    costly = Expensive("costly", 30, 50, 8, 0.9)
    ensemble = Ensemble([BurstPredictor(), costly], min_jobs=5, probe_every=10)
    drive(ensemble, 30)  # 60 calls
    assert ensemble.weights("alice")["costly"] == 0.0
    assert costly.calls < 25


def test_calibration_rescales_an_under_confident_member() -> None:
    steady = Fixed("steady", 0, 200, 1, 0.3)
    ensemble = Ensemble([steady], min_jobs=5, min_confidence=0.1)
    outputs = drive(ensemble, 20)
    assert ensemble.record("alice", "steady").precision == 1.0
    assert outputs[-1][0].confidence == pytest.approx(0.6)  # ratio capped at 2
    plain = Ensemble([Fixed("steady", 0, 200, 1, 0.3)], calibrate=False, min_confidence=0.1)
    assert drive(plain, 20)[-1][0].confidence == 0.3


def test_seeded_record_counts_from_the_start() -> None:
    from predictors import Score

    ensemble = Ensemble([BurstPredictor(), never_hit()], min_jobs=5)
    ensemble.seed("alice", "bad", Score(forecasts=50, claimed=0, jobs=50, idle_gpu_s=1e6))
    outputs = drive(ensemble, 1)
    assert ensemble.weights("alice")["bad"] == 0.0
    assert all(f.predictor != "bad" for out in outputs for f in out)


def test_ensemble_configuration_errors() -> None:
    with pytest.raises(ValueError):
        Ensemble([])
    with pytest.raises(ValueError):
        Ensemble([BurstPredictor(), BurstPredictor()])
    with pytest.raises(ValueError):
        Ensemble([BurstPredictor()], baseline="nope")
    with pytest.raises(ValueError):
        Ensemble([BurstPredictor()], mode="vote")
