"""`default:steer=steady`: the replay's default policy with the steady price controller."""

from __future__ import annotations

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.budget_policy import BudgetedPolicy
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import make_policy
from predictors.budget import DEFAULT_STEADY_WINDOW_S, BudgetController, SteadyController
from tests.replay.synthetic import hidden_user, random_submitters


def _policy(spec: str) -> BudgetedPolicy:
    load_plugins()
    policy = make_policy(spec)
    assert isinstance(policy, BudgetedPolicy)
    return policy


def test_steer_picks_the_controller_and_its_own_options() -> None:
    steady = _policy("default:steer=steady,elasticity=0.5,tenants=1")
    assert isinstance(steady.budget, SteadyController)
    assert steady.budget.elasticity == 0.5 and steady.budget.window_s == DEFAULT_STEADY_WINDOW_S
    assert steady.tenants is not None
    tenant = steady.tenants.for_tenant("a")
    assert isinstance(tenant, SteadyController) and tenant.elasticity == 0.5
    pi = _policy("default:steer=pi,kp=0.3,window=7200")
    assert isinstance(pi.budget, BudgetController)
    assert (pi.budget.kp, pi.budget.window_s) == (0.3, 7200.0)
    assert _policy("default:steer=steady,window=86400").budget.window_s == 86400.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("default:steer=fast", "option 'steer': 'fast' is not one of steady, pi"),
        ("default:steer=steady,kp=1", "option 'kp' does not apply to steer=steady"),
        ("default:steer=pi,elasticity=0.5", "option 'elasticity' does not apply to steer=pi"),
        ("default:steer=steady,elasticity=0", "'elasticity': must be at least 0.01"),
    ],
)
def test_options_that_do_not_apply_are_refused(spec: str, message: str) -> None:
    load_plugins()
    with pytest.raises(ValueError, match=message):
        make_policy(spec)


def test_the_steady_controller_pulls_realised_idle_toward_the_budget() -> None:
    # Four users, 2-GPU jobs of 600 s at random (mean gap 1500 s) for four days: started at a
    # price far too cheap, the controller raises it, cutting the idle more than five times
    # (on so sparse a trace, whose idle falls off a cliff with price, not to the budget).
    jobs = random_submitters("abcd", days=4)
    config = SimConfig(64, gpus_per_node=8, cold_start_s=120.0)
    spec = "default:budget=0.05,price=0.0005,steer=steady,window=43200"
    fixed = Simulator(jobs, _policy("default:budget=0.05,price=0.0005,period=1e12"), config).run()
    steered = Simulator(jobs, _policy(spec), config).run()
    reactive = Simulator(jobs, make_policy("reactive"), config).run()
    assert fixed["extra_idle_ratio"] > 1.0
    assert steered["price_updates"] > 50 and steered["final_price"] > 0.05
    assert steered["extra_idle_ratio"] < fixed["extra_idle_ratio"] / 5
    assert steered["mean_time_to_gpu_s"] < reactive["mean_time_to_gpu_s"]


def test_each_users_periods_are_kept_at_the_price_it_paid() -> None:
    # A user pays the higher of its own price and the cluster's: its controller must learn
    # from that price, never from a lower one of its own.
    jobs = hidden_user()
    policy = _policy("default:budget=0.05,steer=steady,window=21600,tenants=1")
    Simulator(jobs, policy, SimConfig(64, gpus_per_node=8, cold_start_s=100.0)).run()
    assert policy.tenants is not None
    cluster = {end: price for end, _, _, price in policy.tenants.cluster.periods}
    for user in "ac":
        periods = policy.tenants.tenants[user].periods
        assert periods and all(
            price >= cluster[end] for end, _, _, price in periods if end in cluster
        )
