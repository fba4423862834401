"""The pre-warm policy: its file validation (file, line, key, value, allowed) and decisions."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from predictors.types import Forecast
from smart_agent.decide import HeldWindow, PolicyState, decide
from smart_agent.policy import Policy
from smart_agent.yamlconf import ConfigError, load_model

NOW = datetime(2026, 11, 18, 12, 0).timestamp()  # a Wednesday, noon local time


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prewarm-policy.yaml"
    path.write_text(text)
    return path


def test_good_file_fills_defaults(tmp_path: Path) -> None:
    policy = load_model(Policy, _write(tmp_path, "min_confidence: 0.6\nquiet_days: [sun]\n"))
    assert policy.min_confidence == 0.6 and policy.quiet_days == ["sun"]
    assert policy.max_gpus_per_hold == 8 and policy.cooldown_s == {"default": 300.0}


def test_unknown_key_names_file_line_and_allowed_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "min_confidence: 0.6\nmax_gpu_per_hold: 4\n")
    with pytest.raises(ConfigError) as err:
        load_model(Policy, path)
    message = str(err.value)
    assert f"{path}:2" in message and "'max_gpu_per_hold'" in message
    assert "unknown key" in message and "max_gpus_per_hold" in message


def test_wrong_type_names_the_value(tmp_path: Path) -> None:
    path = _write(tmp_path, "lead_s: 120\nmax_gpus_total: lots\n")
    with pytest.raises(ConfigError) as err:
        load_model(Policy, path)
    assert f"{path}:2" in str(err.value) and "'lots'" in str(err.value)


def test_negative_budget_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "min_confidence: 0.6\ndaily_idle_gpu_hours: -1\n")
    with pytest.raises(ConfigError) as err:
        load_model(Policy, path)
    message = str(err.value)
    assert f"{path}:2" in message and "'daily_idle_gpu_hours'" in message
    assert "greater than or equal to 0" in message


def test_overlapping_quiet_hours_are_refused(tmp_path: Path) -> None:
    text = 'quiet_hours: ["22:00-07:00", "06:00-08:00"]\n'
    with pytest.raises(ConfigError) as err:
        load_model(Policy, _write(tmp_path, text))
    assert "overlap" in str(err.value) and ":1" in str(err.value)


def test_bad_llm_section_is_located(tmp_path: Path) -> None:
    path = _write(tmp_path, "predictors: [burst, llm]\nllm:\n  model: x\n  calls_per_hour: -3\n")
    with pytest.raises(ConfigError) as err:
        load_model(Policy, path)
    assert f"{path}:4" in str(err.value) and "llm.calls_per_hour" in str(err.value)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "min_confidence: 0.5\nquiet_days: [sun\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_model(Policy, path)


def _forecast(**values: float) -> Forecast:
    base = {"start_at": NOW + 300, "end_at": NOW + 900, "gpu_count": 2, "confidence": 0.8}
    base.update(values)
    return Forecast(predictor="test", **base)  # type: ignore[arg-type]


def test_decision_clips_gpus_to_the_policy() -> None:
    decision = decide(
        Policy(max_gpus_per_hold=4), _forecast(gpu_count=1000), now=NOW, state=PolicyState()
    )
    assert decision.accepted and decision.intent is not None
    assert decision.intent.gpu_count == 4 and "clipped from 1000" in decision.reason


def test_decision_clips_gpus_to_the_largest_job() -> None:
    """A forecast hold is never bigger than one job of the user's may take (max_job_gpus)."""
    cap = (2, "the largest of your jobs seen so far")
    decision = decide(
        Policy(max_gpus_per_hold=4), _forecast(gpu_count=512), now=NOW, state=PolicyState(),
        job_cap=cap,
    )  # fmt: skip
    assert decision.accepted and decision.intent is not None and decision.intent.gpu_count == 2
    assert decision.reason == (
        "accepted, clipped from 512 to max_job_gpus 2 (the largest of your jobs seen so far)"
    )
    within = decide(Policy(), _forecast(gpu_count=2), now=NOW, state=PolicyState(), job_cap=cap)
    assert within.intent is not None and within.intent.gpu_count == 2
    assert within.reason == "accepted"


@pytest.mark.parametrize(
    ("policy", "forecast", "state", "why"),
    [
        (Policy(min_confidence=0.9), _forecast(), PolicyState(), "below min_confidence"),
        (Policy(), _forecast(start_at=NOW + 7200, end_at=NOW + 8000), PolicyState(), "max_horizon"),
        (Policy(quiet_days=["wed"]), _forecast(), PolicyState(), "quiet"),
        (
            Policy(max_gpus_total=8, max_gpus_per_hold=4),
            _forecast(gpu_count=4),
            PolicyState(held_gpus=6),
            "max_gpus_total",
        ),
        (
            Policy(daily_idle_gpu_hours=1),
            _forecast(),
            PolicyState(idle_gpu_hours_today=1.5),
            "daily_idle_gpu_hours",
        ),
        (
            Policy(),
            _forecast(),
            PolicyState(windows=[HeldWindow(NOW, NOW + 1000, 2, None)]),
            "already covers",
        ),
    ],
)
def test_refusals_say_why(policy: Policy, forecast: Forecast, state: PolicyState, why: str) -> None:
    decision = decide(policy, forecast, now=NOW, state=state)
    assert not decision.accepted and why in decision.reason


def test_ttl_spans_the_window_within_the_cap() -> None:
    intent = decide(Policy(hold_ttl_s=300), _forecast(), now=NOW, state=PolicyState()).intent
    assert intent is not None and intent.ttl_s == 300
    intent = decide(Policy(hold_ttl_s=3600), _forecast(), now=NOW, state=PolicyState()).intent
    assert intent is not None and intent.ttl_s == 600


def test_quiet_hours_wrap_midnight() -> None:
    policy = Policy(quiet_hours=["22:00-07:00"])
    assert policy.is_quiet(datetime(2026, 11, 18, 23, 30).timestamp())
    assert policy.is_quiet(datetime(2026, 11, 18, 6, 59).timestamp())
    assert not policy.is_quiet(datetime(2026, 11, 18, 7, 0).timestamp())


def test_shipped_and_documented_policies_are_valid(tmp_path: Path) -> None:
    import re

    repo = Path(__file__).resolve().parents[2]
    load_model(Policy, repo / "configs" / "prewarm-policy.yaml")
    examples = re.findall(r"```yaml\n(.*?)```", (repo / "docs" / "policy.md").read_text(), re.S)
    assert len(examples) == 2
    for text in examples:
        load_model(Policy, _write(tmp_path, text))


def test_policy_reload_keeps_the_old_policy_on_a_bad_edit(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    import os

    from smart_agent.runner import PolicyFile

    path = _write(tmp_path, "min_confidence: 0.6\n")
    holder = PolicyFile(path)
    assert holder.reload() is False  # nothing changed

    def edit(text: str, stamp: float) -> None:
        path.write_text(text)
        os.utime(path, (stamp, stamp))

    edit("min_confidence: 1.7\n", 1_000_000)
    with caplog.at_level("ERROR", logger="jitgpu.agent"):
        assert holder.reload() is False
    assert holder.policy.min_confidence == 0.6
    assert "policy edit refused" in caplog.text and "min_confidence" in caplog.text
    edit("min_confidence: 0.8\n", 2_000_000)
    assert holder.reload() is True and holder.policy.min_confidence == 0.8
