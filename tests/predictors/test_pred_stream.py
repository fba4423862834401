"""The stream bridge: each forecast slot is asked for once, extensions as their new part."""

from __future__ import annotations

from dataclasses import dataclass

from pred_helpers import T0, finish, submit

from predictors import BurstPredictor, Context, Forecast, StreamForecaster


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    submit: float
    gpus: int
    duration: float


def test_repeated_forecasts_become_one_slot_and_extensions() -> None:
    bridge = StreamForecaster(BurstPredictor(window_s=600))
    bridge.observe_arrival(Job("a", "alice", T0, 4, 60), T0)
    [first] = bridge.forecast(T0)
    assert (first.start_at, first.end_at, first.gpu_count) == (T0, T0 + 600, 4)
    assert first.user == "alice" and first.ttl_s == 600
    assert bridge.forecast(T0 + 1) == []  # nothing new happened, nothing asked
    bridge.observe_finish(Job("a", "alice", T0, 4, 60), T0 + 60)
    [extension] = bridge.forecast(T0 + 60)
    assert (extension.start_at, extension.end_at) == (T0 + 600, T0 + 660)


def test_an_arrival_uses_up_its_slot() -> None:
    bridge = StreamForecaster(BurstPredictor(window_s=600))
    bridge.observe(submit(T0, gpus=2, job="a"))
    bridge.forecast(T0)
    bridge.observe(submit(T0 + 120, gpus=2, job="b"))
    [again] = bridge.forecast(T0 + 120)
    assert (again.start_at, again.end_at) == (T0 + 120, T0 + 720)
    # Its start is no new arrival, and its finish only extends the slot.
    bridge.observe(finish(T0 + 180, gpus=2, job="b"))
    [part] = bridge.forecast(T0 + 180)
    assert part.start_at == T0 + 720


class Always:
    name = "always"

    def __init__(self, conf: float) -> None:
        self.conf = conf
        self.asked: list[str] = []

    def predict(self, context: Context, now: float) -> list[Forecast]:
        self.asked.append(context.user)
        return [Forecast(now + 3600, now + 7200, 1, self.conf, self.name)]


def test_refresh_asks_quiet_users_and_confidence_filters() -> None:
    quiet = Always(0.5)
    bridge = StreamForecaster(quiet, refresh_s=3600, min_confidence=0.4)
    bridge.observe(submit(T0, "bob"))
    assert len(bridge.forecast(T0)) == 1
    bridge.forecast(T0 + 100)
    assert quiet.asked == ["bob"]
    assert len(bridge.forecast(T0 + 3600)) == 1  # re-asked; the window moved past the slot
    assert quiet.asked == ["bob", "bob"]
    picky = StreamForecaster(Always(0.3), min_confidence=0.4)
    picky.observe(submit(T0, "bob"))
    assert picky.forecast(T0) == []
