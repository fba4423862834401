"""A budget controller per user of the trace beside the cluster's (`default:tenants=1`)."""

from __future__ import annotations

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.budget_policy import BudgetedPolicy
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import make_policy
from control_plane.replay.trace import Job
from predictors.budget import SteadyController
from tests.replay.synthetic import hidden_user


def _extra(sim: Simulator, user: str) -> float:
    t = sim.user_totals(user)
    return (t.idle_gpu_s - t.reactive_idle_gpu_s) / t.busy_gpu_s


def _sim(jobs: list[Job], spec: str) -> tuple[Simulator, BudgetedPolicy]:
    load_plugins()
    policy = make_policy(spec)
    assert isinstance(policy, BudgetedPolicy)
    return Simulator(jobs, policy, SimConfig(64, gpus_per_node=8, cold_start_s=100.0)), policy


def test_per_user_totals_add_up_to_the_clusters() -> None:
    sim, _ = _sim(hidden_user(0.5), "default:budget=0.05,tenants=1")
    sim.run()
    whole = sim.totals()
    parts = [sim.user_totals(u) for u in "ac"]
    assert sum(p.idle_gpu_s for p in parts) == pytest.approx(whole.idle_gpu_s)
    assert sum(p.reactive_idle_gpu_s for p in parts) == pytest.approx(whole.reactive_idle_gpu_s)
    assert sum(p.busy_gpu_s for p in parts) == pytest.approx(whole.busy_gpu_s, rel=1e-6)
    assert parts[0].idle_gpu_s > parts[0].reactive_idle_gpu_s and parts[1].busy_gpu_s > 0


def test_a_user_over_its_budget_is_priced_by_its_own_controller() -> None:
    jobs = hidden_user()
    # The day-by-day controller, over a window short enough for a two-day trace.
    spec = "default:budget=0.05,steer=pi,window=21600"
    sim, policy = _sim(jobs, f"{spec},tenants=1")
    result = sim.run()
    assert result["tenant_controllers"] == 2 and result["tenants_judged"] == 2
    tenants = policy.tenants
    assert tenants is not None
    a, c, cluster = tenants.tenants["a"], tenants.tenants["c"], tenants.cluster
    assert a.price > cluster.price > c.price
    (burst,) = policy._bursts
    assert burst.user_prices == {"a": a.price, "c": cluster.price}
    alone, plain = _sim(jobs, spec)
    whole = alone.run()
    assert "tenant_controllers" not in whole and plain.tenants is None
    # The cluster's controller alone let a idle 0.9 GPU-hours per busy GPU-hour (c's busy
    # hours hid it); its own controller cuts that to under a third, and the cluster's too.
    assert _extra(sim, "a") < _extra(alone, "a") / 3
    assert result["extra_idle_ratio"] < whole["extra_idle_ratio"]


def test_tenants_option_is_checked_and_adopted() -> None:
    load_plugins()
    with pytest.raises(ValueError, match="'tenants'"):
        make_policy("default:tenants=maybe")
    trained = make_policy("default:tenants=1")
    assert isinstance(trained, BudgetedPolicy) and trained.tenants is not None
    trained.tenants.for_tenant("a").price = 0.3
    fresh = make_policy("default:tenants=1")
    assert isinstance(fresh, BudgetedPolicy) and fresh.tenants is not None
    fresh.adopt(trained)
    assert fresh.tenants.tenants["a"].price == fresh.tenants.tenants["a"].start_price == 0.3


def test_controller_gains_are_options_checked_and_given_to_every_controller() -> None:
    load_plugins()
    with pytest.raises(ValueError, match="kp"):
        make_policy("default:steer=pi,kp=-1")
    policy = make_policy("default:steer=pi,kp=0.3,ki=0.02,tenants=1")
    assert isinstance(policy, BudgetedPolicy) and policy.tenants is not None
    assert (policy.budget.kp, policy.budget.ki) == (0.3, 0.02)
    tenant = policy.tenants.for_tenant("a")
    assert (tenant.kp, tenant.ki) == (0.3, 0.02)
    plain = make_policy("default:steer=pi")
    assert isinstance(plain, BudgetedPolicy) and (plain.budget.kp, plain.budget.ki) == (1.0, 0.1)
    steady = make_policy("default")
    assert isinstance(steady, BudgetedPolicy) and isinstance(steady.budget, SteadyController)
    assert steady.budget.elasticity == 1.0
