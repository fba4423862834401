"""The LLM predictor through real litellm calls answered by litellm's mock_response."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from pred_llm_helpers import GOOD, INJECTION, NOW, answer, config, context, item

from predictors import BurstPredictor, Ensemble, LlmOutcome, LlmPredictor, LlmStatus
from predictors.llm import load_litellm

litellm = load_litellm()

# litellm's own types trip a pydantic notice on first use; it says nothing about our code.
pytestmark = pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly`:UserWarning")


def predictor(mock: object, **overrides: object) -> LlmPredictor:
    return LlmPredictor(config(**overrides), completion_kwargs={"mock_response": mock})


def test_happy_path_gives_forecasts_with_cost_and_prompt_version() -> None:
    seen: list[LlmOutcome] = []
    p = LlmPredictor(config(), completion_kwargs={"mock_response": GOOD}, on_outcome=seen.append)
    outcome = p.forecast(context(), NOW)
    assert outcome.status is LlmStatus.OK and outcome.requests == 1
    [f] = outcome.forecasts
    assert (f.start_at, f.end_at, f.gpu_count) == (NOW + 60, NOW + 660, 8)
    assert f.confidence == 0.7 and f.predictor == "llm" and f.user == "alice"
    assert f.prompt_version == "forecast/v1" == outcome.prompt_version
    assert outcome.cost.prompt_tokens > 0 and outcome.cost.completion_tokens > 0
    assert outcome.cost.usd > 0 and outcome.cost_known
    assert f.cost == outcome.cost
    assert seen == [outcome] and p.last_outcome is outcome and not p.last_failed
    assert p.predict(context(), NOW) == list(outcome.forecasts)
    log = outcome.to_log()
    assert log["status"] == "ok" and log["prompt_version"] == "forecast/v1"


def test_answer_in_a_code_fence_is_accepted() -> None:
    outcome = predictor(f"```json\n{GOOD}\n```").forecast(context(), NOW)
    assert outcome.status is LlmStatus.OK and len(outcome.forecasts) == 1


def test_empty_answer_is_a_valid_no_demand() -> None:
    outcome = predictor(answer()).forecast(context(), NOW)
    assert outcome.status is LlmStatus.OK and outcome.forecasts == ()


def _error(cls: type, **kw: object) -> Exception:
    return cls(message="mock failure", llm_provider="openai", model="gpt-4o-mini", **kw)


@pytest.mark.parametrize(
    ("mock", "status", "requests"),
    [
        (lambda: _error(litellm.Timeout), LlmStatus.TIMEOUT, 2),
        (lambda: _error(litellm.AuthenticationError), LlmStatus.AUTH_ERROR, 1),
        (lambda: "litellm.RateLimitError", LlmStatus.RATE_LIMITED, 1),
        (lambda: _error(litellm.APIConnectionError), LlmStatus.CONNECTION_ERROR, 2),
        (lambda: "litellm.InternalServerError", LlmStatus.PROVIDER_ERROR, 2),
        (
            lambda: _error(
                litellm.BadRequestError,
            ),
            LlmStatus.PROVIDER_ERROR,
            1,
        ),
        (lambda: "this is not json", LlmStatus.BAD_ANSWER, 2),
        (lambda: answer(item(gpu_count=0)), LlmStatus.BAD_ANSWER, 2),
        (lambda: answer(item(end_in_s=10)), LlmStatus.BAD_ANSWER, 2),
        (lambda: '{"forecasts": [], "reserve": 1000}', LlmStatus.BAD_ANSWER, 2),
    ],
    ids=[
        "timeout",
        "401",
        "429",
        "connection",
        "500",
        "400",
        "not-json",
        "zero-gpus",
        "end-before-start",
        "extra-field",
    ],
)
def test_each_failure_is_a_typed_outcome(mock, status: LlmStatus, requests: int) -> None:
    p = predictor(mock(), max_retries=1)
    outcome = p.forecast(context(), NOW)
    assert outcome.status is status
    assert outcome.requests == requests
    assert outcome.forecasts == () and p.predict(context(), NOW + 7200) == []
    assert p.last_failed and outcome.error


def test_mock_timeout_hits_the_configured_timeout() -> None:
    p = LlmPredictor(
        config(timeout_s=0.05, max_retries=0),
        completion_kwargs={"mock_response": GOOD, "mock_timeout": True},
    )
    outcome = p.forecast(context(), NOW)
    assert outcome.status is LlmStatus.TIMEOUT and outcome.requests == 1
    assert outcome.latency_s < 2.0


def test_bad_json_costs_are_still_counted() -> None:
    outcome = predictor("nope").forecast(context(), NOW)
    assert outcome.status is LlmStatus.BAD_ANSWER
    assert outcome.cost.completion_tokens > 0 and outcome.cost.usd > 0


def test_auth_error_and_429_back_off_until_the_cooldown_ends() -> None:
    p = predictor(_error(litellm.AuthenticationError), cooldown_s=600)
    assert p.forecast(context(), NOW).status is LlmStatus.AUTH_ERROR
    paused = p.forecast(context(), NOW + 599)
    assert paused.status is LlmStatus.BACKING_OFF and paused.requests == 0
    assert p.forecast(context(), NOW + 600).status is LlmStatus.AUTH_ERROR


def test_missing_key_variable_is_an_auth_error_without_a_request(monkeypatch) -> None:
    monkeypatch.delenv("JITGPU_TEST_NO_SUCH_KEY", raising=False)
    outcome = predictor(GOOD, api_key_env="JITGPU_TEST_NO_SUCH_KEY").forecast(context(), NOW)
    assert outcome.status is LlmStatus.AUTH_ERROR and outcome.requests == 0
    assert "JITGPU_TEST_NO_SUCH_KEY" in (outcome.error or "")


def test_rate_cap_counts_requests_per_rolling_hour() -> None:
    p = predictor(GOOD, calls_per_hour=2)
    assert p.forecast(context(), NOW).ok
    assert p.forecast(context(), NOW + 10).ok
    capped = p.forecast(context(), NOW + 20)
    assert capped.status is LlmStatus.RATE_CAPPED and capped.requests == 0
    assert p.forecast(context(), NOW + 3601).ok


def test_rate_cap_stops_a_retry() -> None:
    outcome = predictor("nope", calls_per_hour=1).forecast(context(), NOW)
    assert outcome.status is LlmStatus.RATE_CAPPED and outcome.requests == 1


def test_daily_cost_cap_refuses_a_call_that_would_overshoot_then_resets() -> None:
    cost = predictor(GOOD).forecast(context(), NOW).cost.usd
    assert cost > 0
    p = predictor(GOOD, usd_per_day=cost * 1.5)
    assert p.forecast(context(), NOW).ok
    # 1.0 x cost spent, about 1.0 x cost expected: more than 1.5 x cost, refused unsent.
    refused = p.forecast(context(), NOW + 60)
    assert refused.status is LlmStatus.BUDGET_EXHAUSTED and refused.requests == 0
    assert p.guard.spent_today(NOW + 60) == pytest.approx(cost)
    assert p.forecast(context(), NOW + 86_400).ok  # a new UTC day


def test_spend_restored_after_a_restart_counts() -> None:
    p = predictor(GOOD, usd_per_day=1.0)
    p.guard.record_spend(NOW - 3600, 1.0)
    assert p.forecast(context(), NOW).status is LlmStatus.BUDGET_EXHAUSTED


def test_price_override_for_unknown_models() -> None:
    p = predictor(GOOD, input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
    outcome = p.forecast(context(), NOW)
    expected = (outcome.cost.prompt_tokens * 1.0 + outcome.cost.completion_tokens * 2.0) / 1e6
    assert outcome.cost.usd == pytest.approx(expected)


def test_hostile_answer_is_bounded_whatever_it_says() -> None:
    hostile = answer(
        item(gpu_count=1000, start_in_s=0, end_in_s=600_000, confidence=1.0),
        item(start_in_s=500_000, end_in_s=500_100),  # beyond the horizon
        *[item(confidence=0.1)] * 5,
    )
    p = predictor(hostile, max_forecasts=4)
    outcome = p.forecast(context(INJECTION), NOW)
    assert outcome.ok
    assert len(outcome.forecasts) <= 4
    top = outcome.forecasts[0]
    assert top.gpu_count == 16  # twice the user's largest job (8)
    assert top.end_at - top.start_at == p.config.max_window_s
    assert all(f.start_at - NOW <= p.config.max_horizon_s for f in outcome.forecasts)
    assert outcome.clamped >= 3


def test_failing_llm_falls_back_to_the_statistical_members() -> None:
    llm = predictor(_error(litellm.AuthenticationError))
    ensemble = Ensemble([BurstPredictor(window_s=3600), llm], mode="select", min_jobs=0)
    out = ensemble.predict(context(), NOW)
    assert out and {f.predictor for f in out} == {"burst"}
    assert llm.last_outcome is not None and llm.last_outcome.status is LlmStatus.AUTH_ERROR


def test_working_llm_is_heard_in_the_ensemble() -> None:
    ensemble = Ensemble([BurstPredictor(), predictor(GOOD)])
    assert "llm" in {f.predictor for f in ensemble.predict(context(), NOW)}


def test_unexpected_bug_is_an_error_outcome() -> None:
    p = predictor(GOOD)
    p.completion_kwargs["messages"] = "not a list"  # breaks the request itself
    outcome = p.forecast(context(), NOW)
    assert outcome.status is LlmStatus.ERROR and outcome.forecasts == ()


def test_a_failing_outcome_callback_does_not_reach_the_caller() -> None:
    def explode(outcome: LlmOutcome) -> None:
        raise RuntimeError("log is full")

    p = LlmPredictor(config(), completion_kwargs={"mock_response": GOOD}, on_outcome=explode)
    assert len(p.predict(context(), NOW)) == 1


def test_classify_walks_the_cause_chain() -> None:
    from predictors.llm_outcome import classify_error

    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as inner:
            raise _error(litellm.InternalServerError) from inner
    except Exception as exc:
        assert classify_error(exc) == (LlmStatus.CONNECTION_ERROR, True)
    read_timeout = httpx.ReadTimeout("slow")
    assert classify_error(read_timeout) == (LlmStatus.TIMEOUT, True)
    assert classify_error(ValueError("x")) == (LlmStatus.ERROR, False)


def test_importing_predictors_does_not_import_litellm() -> None:
    code = (
        "import sys, predictors\n"
        "from predictors import BurstPredictor, HistoryBuilder, Event, EventKind\n"
        "b = HistoryBuilder(); b.observe(Event(EventKind.JOB_SUBMITTED, 0.0, 'u', gpus=1))\n"
        "BurstPredictor().predict(b.context('u', 1.0), 1.0)\n"
        "assert 'litellm' not in sys.modules, 'litellm was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_litellm_is_loaded_with_the_local_price_map_whatever_the_environment() -> None:
    code = (
        "from predictors.llm import load_litellm\n"
        "load_litellm()\n"
        "from litellm.litellm_core_utils.get_model_cost_map import "
        "get_model_cost_map_source_info as info\n"
        # litellm's own record: the bundled map, forced, and no remote fetch tried.
        "got = info()\n"
        "assert (got['source'], got['is_env_forced'], got['url']) == ('local', True, None), got\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "False"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
