"""The policy's idle budget: validated in the file, and it turns the agent's burst member priced."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.budget import price_for_budget
from predictors.burst import BurstPredictor
from smart_agent.policy import Policy
from smart_agent.predictor_set import PredictorSet
from smart_agent.yamlconf import ConfigError, load_model

REPO = Path(__file__).resolve().parents[2]


def _burst(policy: Policy) -> BurstPredictor:
    members = [m.inner for m in PredictorSet(policy).members]
    (burst,) = [m for m in members if isinstance(m, BurstPredictor)]
    return burst


def test_the_shipped_policy_sets_a_budget_and_the_burst_member_is_priced() -> None:
    policy = load_model(Policy, REPO / "configs" / "prewarm-policy.yaml")
    assert policy.idle_budget == 0.05
    burst = _burst(policy)
    assert burst.price == price_for_budget(0.05) and burst.max_jobs == 4
    assert burst.size == "ending" and burst.lead_s == policy.lead_s


def test_without_a_budget_the_burst_member_keeps_its_fixed_window() -> None:
    burst = _burst(Policy(predictors=["burst"]))
    assert burst.price is None and burst.window_s == 600.0


def test_a_bad_budget_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "prewarm-policy.yaml"
    path.write_text("min_confidence: 0.5\nidle_budget: -0.01\n")
    with pytest.raises(ConfigError) as err:
        load_model(Policy, path)
    assert f"{path}:2" in str(err.value) and "'idle_budget'" in str(err.value)


def test_price_for_budget_interpolates_and_holds_at_the_ends() -> None:
    low, mid, high = (price_for_budget(b) for b in (0.001, 0.05, 5.0))
    assert low > mid > high  # more budget, cheaper idle
    assert price_for_budget(0.03) < price_for_budget(0.02)
