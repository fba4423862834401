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

from control_plane.replay.forecast import ForecastPolicy
from control_plane.replay.policies import Policy, parse_options, register_policy
from control_plane.replay.predictor_policies import ADAPTER, adapt

MODEL_ENV = "JITGPU_LLM_MODEL"
# Option of the spec -> the LlmConfig setting it gives.
LLM_OPTIONS = {
    "model": "model",
    "api_base": "api_base",
    "key_env": "api_key_env",
    "calls_per_hour": "calls_per_hour",
    "usd_per_day": "usd_per_day",
    "timeout": "timeout_s",
    "prompt": "prompt",
}


def _llm(arg: str | None) -> Policy:
    # litellm is heavy: the predictor module (and litellm itself, at the first call) loads
    # only when this policy is built.
    from pydantic import ValidationError

    from predictors.llm import LlmPredictor
    from predictors.llm_config import LlmConfig, settings_from_env

    options = parse_options(arg, allowed=(*LLM_OPTIONS, *ADAPTER))
    settings: dict[str, str] = settings_from_env()
    settings.update({field: options[opt] for opt, field in LLM_OPTIONS.items() if opt in options})
    if not settings.get("model"):
        raise ValueError(
            f"no model configured: give llm:model=NAME (any litellm model; api_base=URL for an "
            f"OpenAI-compatible server, key_env=VAR for its key) or set {MODEL_ENV}"
        )
    try:
        config = LlmConfig.model_validate(settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0])
        option = next((o for o, f in LLM_OPTIONS.items() if f == field), field)
        raise ValueError(f"option {option!r}: {first['msg']}") from None
    policy: ForecastPolicy = adapt(LlmPredictor(config), options)
    return policy


register_policy(
    "llm",
    _llm,
    "the LLM predictor (litellm) on the user's job history; needs model= or "
    f"{MODEL_ENV} (api_base=, key_env=, calls_per_hour=, usd_per_day=, conf=)",
)
