"""The LLM predictor as a replay policy: real litellm calls to a local server, in virtual time."""

from __future__ import annotations

import pytest
from pred_llm_helpers import answer, item
from pred_llm_server import Script, serve

from control_plane.replay.api import load_plugins
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import make_policy
from control_plane.replay.trace import Job

pytestmark = pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly`:UserWarning")

KEY_ENV = "JITGPU_TEST_LLM_KEY"


def _jobs() -> list[Job]:
    # One user running a 2-GPU job every 10 minutes, each 5 minutes long: a job ends before the
    # next arrives, so with cold start 120 s only a forecast can make the next one warm.
    return [Job(i, f"j{i}", "alice", 600.0 * i, 2, 300.0) for i in range(6)]


def test_llm_forecasts_become_holds_and_warm_hits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    # The model says: 2 GPUs within the next 15 minutes (the next job comes within 10).
    script = Script()
    for _ in range(40):
        script.answer(answer(item(start_in_s=0, end_in_s=900, gpu_count=2, confidence=0.8)))
    load_plugins()
    with serve(script) as api_base:
        spec = f"llm:model=openai/test-model,api_base={api_base},key_env={KEY_ENV}"
        sim = Simulator(_jobs(), make_policy(spec), SimConfig(16, cold_start_s=120.0))
        result = sim.run()
    # Asked after each arrival and finish; every job after the first found warm GPUs.
    assert len(script.requests) >= 6
    assert result["warm_hits"] == 5 and result["misses"]["first_job"] == 1
    assert result["mean_time_to_gpu_s"] == pytest.approx(120.0 / 6)
    # The model saw the user's job history, in the replay's virtual time (a job every 600 s).
    prompt = script.requests[-1]["body"]["messages"][-1]["content"]
    assert '"jobs_seen":6' in prompt
    assert '"gap_between_submits_s":{"p10":600.0,"p50":600.0' in prompt


def test_a_failing_model_leaves_the_replay_reactive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    script = Script()
    for _ in range(40):
        script.status(500)
    load_plugins()
    with serve(script) as api_base:
        spec = f"llm:model=openai/test-model,api_base={api_base},key_env={KEY_ENV},calls_per_hour=4"
        sim = Simulator(_jobs(), make_policy(spec), SimConfig(16, cold_start_s=120.0))
        result = sim.run()
    assert result["warm_hits"] == 0 and result["mean_time_to_gpu_s"] == 120.0
    # The rate limit counts virtual hours: the trace spans under one, so at most 4 requests.
    assert 1 <= len(script.requests) <= 4


def test_the_model_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JITGPU_LLM_MODEL", "openai/from-env")
    load_plugins()
    policy = make_policy("llm:conf=0.5")
    assert policy.forecaster.predictor.config.model == "openai/from-env"  # type: ignore[attr-defined]
