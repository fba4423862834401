"""The LLM predictor as a replay policy, offered only when a model is configured.

`--policy llm:model=NAME[,api_base=URL][,key_env=VAR][,calls_per_hour=N][,usd_per_day=X]
[,timeout=S][,prompt=forecast/v1]` plus the adapter's options (`conf`, `ttl`, ...), or plain
`llm` with `JITGPU_LLM_MODEL` (and `JITGPU_LLM_API_BASE`, `JITGPU_LLM_KEY_ENV`) set. A trace
carries no logs, so the model sees only the job events of the user's history; it is asked
after each arrival and finish of a user, like every predictor policy, and its rate limit and
daily dollar cap count in the replay's virtual time. A failed call forecasts nothing (the
replay then behaves as reactive for that user until the next call).
"""

from __future__ import annotations

import os

from control_plane.replay.forecast import ForecastPolicy
from control_plane.replay.policies import Policy, number, parse_options, register_policy
from control_plane.replay.predictor_policies import ADAPTER, adapt

MODEL_ENV = "JITGPU_LLM_MODEL"
LLM_OPTIONS = (
    "model",
    "api_base",
    "key_env",
    "calls_per_hour",
    "usd_per_day",
    "timeout",
    "prompt",
)


def _llm(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*LLM_OPTIONS, *ADAPTER))
    model = options.get("model") or os.environ.get(MODEL_ENV)
    if not model:
        raise ValueError(
            f"no model configured: give llm:model=NAME (any litellm model; api_base=URL for an "
            f"OpenAI-compatible server, key_env=VAR for its key) or set {MODEL_ENV}"
        )
    settings: dict[str, object] = {"model": model}
    api_base = options.get("api_base") or os.environ.get("JITGPU_LLM_API_BASE")
    key_env = options.get("key_env") or os.environ.get("JITGPU_LLM_KEY_ENV")
    if api_base:
        settings["api_base"] = api_base
    if key_env:
        settings["api_key_env"] = key_env
    if "calls_per_hour" in options:
        calls = number(options, "calls_per_hour", 0.0)
        if calls != int(calls):
            raise ValueError("option 'calls_per_hour': must be a whole number")
        settings["calls_per_hour"] = int(calls)
    if "usd_per_day" in options:
        settings["usd_per_day"] = number(options, "usd_per_day", 0.0)
    if "timeout" in options:
        settings["timeout_s"] = number(options, "timeout", 20.0, minimum=0.1)
    if "prompt" in options:
        settings["prompt"] = options["prompt"]
    # litellm is heavy: the predictor module (and litellm itself, at the first call) loads
    # only when this policy is built.
    from pydantic import ValidationError

    from predictors.llm import LlmPredictor
    from predictors.llm_config import LlmConfig

    try:
        config = LlmConfig(**settings)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"option {where!r}: {first['msg']}") from None
    policy: ForecastPolicy = adapt(LlmPredictor(config), options)
    return policy


register_policy(
    "llm",
    _llm,
    "the LLM predictor (litellm) on the user's job history; needs model= or "
    f"{MODEL_ENV} (api_base=, key_env=, calls_per_hour=, usd_per_day=, conf=)",
)
