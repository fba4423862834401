"""The agent steers its priced forecast to the idle budget from its own realised idle."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from predictors.budget import SteadyController, price_for_budget
from predictors.types import Forecast
from smart_agent.agent import Agent
from smart_agent.cli.main import app
from smart_agent.idle_steer import STEER_META_KEY, IdleSteer, realised
from smart_agent.policy import Policy
from smart_agent.predictor_set import PredictorSet
from smart_agent.predlog import PredictionLog
from tests.smart_agent.agent_world import USER, World

NOW = 2_000_000.0


def _hold(log: PredictionLog, hold_id: str, *, made: float, start: float, gpus: int) -> None:
    fid = log.forecast(
        Forecast(start, start + 600, gpus, 0.9, "burst"),
        cycle_id=None,
        made_at=made,
        user=USER,
        decision="accepted",
        reason="ok",
    )
    log.hold_made(fid, hold_id=hold_id, gpus=gpus)


def _job(log: PredictionLog, at: float, gpus: int, ended: float | None) -> None:
    job_id = log.job(at=at, user=USER, gpus=gpus, gpu_model=None, source="t", job_ref=None)
    if ended is not None:
        log.job_update(job_id, ended_at=ended)


def _idle_day(log: PredictionLog, now: float) -> None:
    """Within the hour before `now`: 2 idle GPU-hours (an 8-GPU hold unclaimed for 15 min)
    and 4 busy GPU-hours (4 GPUs for an hour): a ratio of 0.5, ten times a 0.05 budget."""
    _hold(log, "h-idle", made=now - 3000, start=now - 2880, gpus=8)
    log.hold_outcome("h-idle", outcome="expired", at=now - 2100, idle_gpu_minutes=8 * 15)
    _job(log, now - 3600, 4, now)


def test_realised_sums_only_the_window(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path / "p.db")
    _hold(log, "h1", made=NOW - 3000, start=NOW - 2880, gpus=4)
    log.hold_outcome("h1", outcome="expired", at=NOW - 1200, idle_gpu_minutes=4 * 30)
    _hold(log, "h2", made=NOW - 600, start=NOW - 480, gpus=2)  # pending, placed at NOW - 600
    _hold(log, "h3", made=NOW - 9000, start=NOW - 8880, gpus=8)
    log.hold_outcome("h3", outcome="expired", at=NOW - 4000, idle_gpu_minutes=8 * 60)
    _hold(log, "h4", made=NOW - 4200, start=NOW - 4080, gpus=1)  # half inside the window
    log.hold_outcome(
        "h4", outcome="claimed", at=NOW - 3000, claimed_at=NOW - 3000, idle_gpu_minutes=20
    )
    _job(log, NOW - 2000, 8, NOW - 1000)
    _job(log, NOW - 500, 4, None)  # still running
    _job(log, NOW - 5000, 2, NOW - 3000)  # its last 600 s are inside
    got = realised(log, NOW, window_s=3600, lead_s=120)
    assert got.idle_gpu_s == 4 * 1800 + 2 * 600 + 1 * 600
    assert got.busy_gpu_s == 8 * 1000 + 4 * 500 + 2 * 600
    log.close()


def test_the_price_rises_when_over_budget_falls_under_it_and_steps_at_its_pace(
    tmp_path: Path,
) -> None:
    over = PredictionLog(tmp_path / "over.db")
    _idle_day(over, NOW)
    member = SimpleNamespace(price=1.0)
    steer = IdleSteer(0.05, steer="pi", window_s=3600, every_s=300)
    start = price_for_budget(0.05)
    price = steer.step(over, NOW, [member])
    assert steer.last is not None and steer.last.ratio == 0.5
    assert price > start and member.price == price
    steer.step(over, NOW + 100, [member])  # not due yet: no second controller step
    assert steer.controller.updates == 1
    steer.step(over, NOW + 300, [member])
    assert steer.controller.updates == 2 and steer.price >= price
    saved = json.loads(over.get_meta(STEER_META_KEY) or "{}")
    assert saved["budget"] == 0.05 and saved["price"] == steer.price
    over.close()

    under = PredictionLog(tmp_path / "under.db")
    _job(under, NOW - 3600, 8, None)  # 8 busy GPU-hours, nothing idle
    low = IdleSteer(0.05, steer="pi", window_s=3600)
    assert low.step(under, NOW, []) < start and low.last and low.last.ratio == 0.0
    under.close()


def test_the_steady_controller_counts_each_step_as_a_period_after_a_first_whole_window(
    tmp_path: Path,
) -> None:
    log = PredictionLog(tmp_path / "p.db")
    _idle_day(log, NOW)
    steer = IdleSteer(0.05, steer="steady", window_s=3600, every_s=300, period_s=300)
    assert isinstance(steer.controller, SteadyController)
    start = price_for_budget(0.05)
    # The whole window, spent at the starting price: ten times the budget, so the price
    # rises as far as one step lets it.
    assert steer.step(log, NOW, []) == pytest.approx(2 * start)
    assert steer.last is not None and steer.last.ratio == 0.5
    # Five minutes later: only those five minutes are a new period (a 2-GPU job ran 240 s of
    # them, nothing idled), and the window's ratio still calls for a higher price.
    _job(log, NOW + 60, 2, NOW + 300)
    steer.step(log, NOW + 300, [])
    # (end, extra idle, busy, price in force), in GPU-seconds.
    assert steer.controller.periods == (
        (NOW, 2 * 3600.0, 4 * 3600.0, start),
        (NOW + 300, 0.0, 2 * 240.0, 2 * start),
    )
    assert steer.price > 2 * start
    log.close()


def test_a_restarted_agent_takes_its_steady_price_and_periods_back(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path / "p.db")
    _idle_day(log, NOW)
    first = IdleSteer(0.05, steer="steady", window_s=3600, every_s=300, period_s=300)
    first.step(log, NOW, [])
    first.step(log, NOW + 300, [])
    assert first.price > 2 * price_for_budget(0.05)  # two steps up from the start
    # A new agent process on the same log, ten minutes later: it goes on from that price, and
    # its first period is only the time since the last run's last step.
    _job(log, NOW + 400, 1, NOW + 900)
    again = IdleSteer(0.05, steer="steady", window_s=3600, every_s=300, period_s=300)
    assert isinstance(again.controller, SteadyController)
    again.step(log, NOW + 900, [])
    ends = [p[0] for p in again.controller.periods]
    assert ends == [NOW, NOW + 300, NOW + 900]
    assert again.controller.periods[-1][1:3] == (0.0, 500.0)
    assert again.controller.periods[-1][3] == first.price  # spent at the price taken back
    # Another budget, or what was saved unreadable: a fresh start over the whole window.
    other = IdleSteer(0.1, steer="steady", window_s=3600, every_s=300, period_s=300)
    other.step(log, NOW + 1200, [])
    assert len(other.controller.periods) == 1
    saved = json.loads(log.get_meta(STEER_META_KEY) or "{}")
    log.set_meta(STEER_META_KEY, json.dumps({**saved, "budget": 0.05, "periods": [["x"]]}))
    broken = IdleSteer(0.05, steer="steady", window_s=3600, every_s=300, period_s=300)
    broken.step(log, NOW + 1500, [])
    assert len(broken.controller.periods) == 1
    assert broken.controller.periods[0][3] == price_for_budget(0.05)
    log.close()


def test_steady_periods_are_hours_and_a_clock_behind_or_a_bad_record_is_survived(
    tmp_path: Path,
) -> None:
    log = PredictionLog(tmp_path / "p.db")
    _idle_day(log, NOW)
    steer = IdleSteer(0.05, steer="steady", window_s=7200, every_s=300)
    for minutes in range(0, 65, 5):  # steps every five minutes for an hour
        steer.step(log, NOW + 60 * minutes, [])
    assert [p[0] for p in steer.controller.periods] == [NOW, NOW + 3600]
    # Restarted with the clock ten minutes behind the last period's end: it takes the record
    # back, and its first period is empty rather than the whole window again.
    behind = IdleSteer(0.05, steer="steady", window_s=7200, every_s=300)
    behind.step(log, NOW + 3000, [])
    assert [p[0] for p in behind.controller.periods] == [NOW, NOW + 3600, NOW + 3000]
    assert behind.controller.periods[-1][1:3] == (0.0, 0.0)
    # A record whose numbers are not finite is not taken back.
    saved = json.loads(log.get_meta(STEER_META_KEY) or "{}")
    saved["periods"][0][1] = float("nan")
    log.set_meta(STEER_META_KEY, json.dumps(saved))
    fresh = IdleSteer(0.05, steer="steady", window_s=7200, every_s=300)
    fresh.step(log, NOW + 4000, [])
    assert len(fresh.controller.periods) == 1
    saved = json.loads(log.get_meta(STEER_META_KEY) or "{}")
    log.set_meta(STEER_META_KEY, json.dumps({**saved, "period_from": float("nan")}))
    nan_end = IdleSteer(0.05, steer="steady", window_s=7200, every_s=300)
    nan_end.step(log, NOW + 4100, [])
    assert len(nan_end.controller.periods) == 1
    log.set_meta(STEER_META_KEY, "{not json")
    IdleSteer(0.05, steer="steady", window_s=7200).step(log, NOW + 4200, [])
    log.close()


def test_the_agent_moves_its_burst_price_by_what_it_idled(world: World) -> None:
    policy = Policy(predictors=["burst"], idle_budget=0.05)
    agent = Agent(
        user=USER,
        policy=policy,
        client=world.client,
        log_=world.log,
        predictors=PredictorSet(policy),
        clock=world.clock,
    )
    now = world.clock()
    (burst,) = agent.predictors.priced()
    assert burst.price == price_for_budget(0.05)
    _idle_day(world.log, now)
    agent.cycle(trigger="timer")
    assert agent.steer is not None and agent.steer.last is not None
    assert agent.steer.last.ratio == 0.5 and burst.price > price_for_budget(0.05)
    agent.policy = Policy(predictors=["burst"])  # the budget removed: no steering
    agent.cycle(trigger="timer")
    assert agent.steer is None


def test_agent_status_shows_the_realised_idle_next_to_the_budget(tmp_path: Path) -> None:
    log_path = tmp_path / "p.db"
    (tmp_path / "policy.yaml").write_text("idle_budget: 0.05\n")
    config = tmp_path / "agent.yaml"
    config.write_text(f"user: alice\npolicy: policy.yaml\nprediction_log: {log_path}\n")
    log = PredictionLog(log_path)
    now = time.time()  # the status command reads the wall clock; the data sits around it
    _idle_day(log, now)
    IdleSteer(0.05, window_s=7200).step(log, now, [])
    log.close()
    result = CliRunner().invoke(app, ["agent", "status", "--config", str(config)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())  # the console wraps long lines
    assert "idle budget 0.05: realised 0.5000 over the last 2 h" in said
    assert "(2.00 idle GPU-h, 4.00 busy GPU-h)" in said
