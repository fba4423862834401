"""Baselines and options that must hold their word: node fit of held GPUs, a lead that follows
the cold start, ensemble options, a clump size above the cap refused, the histogram's own GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import Control, Policy, make_policy
from control_plane.replay.trace import Job

COLD = 100.0


def _jobs(*rows: tuple[str, float, int, float]) -> list[Job]:
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


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
