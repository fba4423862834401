"""Baselines and options that must hold their word: node fit of held GPUs, a lead that follows
the cold start, ensemble options, a clump size above the cap refused, the histogram's own GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from control_plane.replay.api import load_plugins, run_replay
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import Control, Policy, make_policy
from control_plane.replay.trace import Job
from smart_agent.cli.main import app
from tests.replay.synthetic import as_jobs, random_submitters

COLD = 100.0


def _jobs(*rows: tuple[str, float, int, float]) -> list[Job]:
    return as_jobs(list(rows))


def _sim(
    jobs: list[Job], policy: Policy | str, capacity: int = 32, cold: float = COLD
) -> Simulator:
    load_plugins()
    built = make_policy(policy) if isinstance(policy, str) else policy
    return Simulator(jobs, built, SimConfig(capacity, gpus_per_node=8, cold_start_s=cold))


class _Scattered(Policy):
    """Two 4-GPU holds for user a, set aside one after the other (best fit scatters them)."""

    def begin(self, jobs: Any, ctl: Control) -> None:
        ctl.hold("a", 4, 300.0, 1000.0)
        ctl.hold("a", 4, 300.0, 1000.0)


def test_held_gpus_spread_over_more_nodes_than_the_job_needs_are_not_handed_to_it() -> None:
    # Fillers leave node0 half free: the first hold fits there (best fit), the second goes to
    # node3. The 8-GPU job of user a would span two nodes on them: it starts on node4 instead.
    jobs = _jobs(
        ("f", 0, 4, 5000),
        ("g", 0, 8, 5000),
        ("h", 0, 8, 5000),
        ("a", 300, 8, 100),
    )
    sim = _sim(jobs, _Scattered(), capacity=40)
    result = sim.run()
    assert result["claims_misfit"] == 1
    assert result["warm_hits"] == 0
    assert result["hold_gpus_claimed"] == 0 and result["hold_gpus_expired"] == 8


def test_held_gpus_on_one_node_are_claimed() -> None:
    jobs = _jobs(("a", 0, 8, 100), ("a", 300, 8, 100))
    result = _sim(jobs, "keepalive:600").run()
    assert result["claims_misfit"] == 0 and result["warm_hits"] == 1


def test_the_burst_lead_follows_the_cold_start_unless_given() -> None:
    jobs = _jobs(("a", 0, 1, 10), ("a", 100, 1, 10))
    for spec, cold, lead in (
        ("burst:price=0.01", 600.0, 600.0),
        ("burst:price=0.01,lead=120", 600.0, 120.0),
        ("ensemble:price=0.01", 600.0, 600.0),
        ("ensemble:price=0.01,lead=200", 600.0, 200.0),
        ("burst:price=0.01", 0.0, 1.0),
    ):
        sim = _sim(jobs, spec, cold=cold)
        sim.run()
        predictor = sim.policy.forecaster.predictor  # type: ignore[attr-defined]
        members = getattr(predictor, "members", [predictor])
        bursts = [m for m in members if m.name == "burst"]
        assert [b.lead_s for b in bursts] == [lead], spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("burst:price=0.01,jobs=17", "'jobs': at most 16, not 17"),
        ("ensemble:members=histogram+ewma,price=0.01", "'price' is for burst"),
        ("ensemble:members=burst+ewma,tail=0.8", "'tail' is for histogram"),
    ],
)
def test_options_that_cannot_apply_are_errors(spec: str, message: str) -> None:
    load_plugins()
    with pytest.raises(ValueError, match=message):
        make_policy(spec)


def test_clumps_larger_than_five_jobs_are_forecast_not_cut() -> None:
    # Ten 1-GPU jobs in the same second, every 1000 s, each running 5000 s (nothing ends in
    # time for keep-alive): with jobs=10 the whole clump is warm, with jobs=4 part of it.
    rows = [("a", 1000.0 * c, 1, 5000.0) for c in range(12) for _ in range(10)]
    jobs = _jobs(*rows)
    small = _sim(jobs, "burst:price=0.001,jobs=4", capacity=256).run()
    large = _sim(jobs, "burst:price=0.001,jobs=10", capacity=256).run()
    assert large["warm_hits"] == 100 and small["warm_hits"] == 70
    forecaster = make_policy("burst:price=0.001,jobs=10").forecaster  # type: ignore[attr-defined]
    assert forecaster.builder.config.max_k >= 10


def test_the_default_policy_pulls_realised_idle_toward_its_budget() -> None:
    # Four users, 2-GPU jobs of 600 s at random (mean gap 1500 s) for three days: a cheap
    # fixed price holds far too much; started at that price, the controller raises it.
    jobs = random_submitters("abcd", days=3)
    reactive = _sim(jobs, "reactive", capacity=64).run()
    fixed = _sim(jobs, "burst:price=0.0005,jobs=4,fit=0,size=ending", capacity=64).run()
    steered = _sim(jobs, "default:budget=0.05,price=0.0005,window=21600", capacity=64).run()
    assert steered["idle_budget"] == 0.05 and steered["price_updates"] > 50
    assert steered["final_price"] > 0.05
    assert fixed["extra_idle_ratio"] > 5.0
    assert steered["extra_idle_ratio"] < fixed["extra_idle_ratio"] / 5
    assert steered["mean_time_to_gpu_s"] < reactive["mean_time_to_gpu_s"]


def test_default_options_are_checked() -> None:
    load_plugins()
    with pytest.raises(ValueError, match="'budget': must be at least 0"):
        make_policy("default:budget=-1")
    with pytest.raises(ValueError, match="unknown option 'members'"):
        make_policy("default:members=burst")


def test_weighing_seconds_by_gpus_holds_a_large_job_as_long_as_a_small_one() -> None:
    # One user alternates: an 8-GPU job, then 400 s later the next; price chosen so that a
    # per-job valuation finds 8 GPUs idle for 400 s not worth 120 s saved, a per-GPU one does.
    rows = [("a", 600.0 * i, 8, 200.0) for i in range(40)]
    jobs = _jobs(*rows)
    per_job = _sim(jobs, "burst:price=0.05,size=ending", capacity=64).run()
    per_gpu = _sim(jobs, "burst:price=0.05,size=ending,weigh=gpus", capacity=64).run()
    assert per_gpu["warm_hits"] > per_job["warm_hits"]
    assert per_gpu["gpu_weighted_mean_time_to_gpu_s"] < per_job["gpu_weighted_mean_time_to_gpu_s"]
    load_plugins()
    with pytest.raises(ValueError, match="'weigh': 'bytes' is not one of jobs, gpus, sqrt"):
        make_policy("burst:price=0.01,weigh=bytes")


def test_budget_and_split_days_through_the_api_and_the_command(tmp_path: Path) -> None:
    slice_ = Path(__file__).resolve().parents[1] / "data" / "helios_venus_slice.csv"
    # The slice covers hours 9-20 of day 1: train on the first 1.5 days, report the rest.
    whole = run_replay(slice_, 968, policies=["reactive"])
    split = run_replay(slice_, 968, policies=["reactive", "default"], budget=0.05, split="1.5:1")
    assert 0 < split[0]["jobs"] < whole[0]["jobs"]
    assert split[1]["policy"] == "default:budget=0.05" and split[1]["idle_budget"] == 0.05
    with pytest.raises(ValueError, match="--budget applies to --policy default only"):
        run_replay(slice_, 968, policies=["reactive"], budget=0.05)
    with pytest.raises(ValueError, match="expected TRAIN:TEST in days"):
        run_replay(slice_, 968, policies=["reactive"], split="ten")
    with pytest.raises(ValueError, match="no jobs in the training or the test days"):
        run_replay(slice_, 968, policies=["reactive"], split="5:1")
    runner = CliRunner()
    args = ["replay", "--trace", str(slice_), "--capacity", "968", "--policy", "default"]
    result = runner.invoke(app, [*args, "--budget", "0.03", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["idle_budget"] == 0.03
    bad = runner.invoke(app, [*args, "--split-days", "x:y"])
    assert bad.exit_code == 2 and "--split-days 'x:y'" in bad.output


def test_a_trained_default_starts_at_the_price_it_learnt() -> None:
    load_plugins()
    trained = make_policy("default:price=0.02")
    trained.budget.price = 0.5  # type: ignore[attr-defined]
    fresh = make_policy("default:price=0.02")
    fresh.adopt(trained)
    assert fresh.budget.price == fresh.budget.start_price == 0.5  # type: ignore[attr-defined]
