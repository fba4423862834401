"""Configuration of the LLM predictor: which model, how long to wait, how much it may spend."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PROMPT = "forecast/v1"
# The LLM a user names in the environment (for the demo and `jitgpu replay --policy llm`).
ENV_SETTINGS = {
    "model": "JITGPU_LLM_MODEL",
    "api_base": "JITGPU_LLM_API_BASE",
    "api_key_env": "JITGPU_LLM_KEY_ENV",
}


def settings_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`LlmConfig` settings from the JITGPU_LLM_* variables that are set (and not empty)."""
    return {key: environ[var] for key, var in ENV_SETTINGS.items() if environ.get(var)}


class LlmConfig(BaseModel):
    """The user's LLM settings (a section of the smart agent's YAML).

    `model` is any litellm model string ("gpt-4o-mini", "anthropic/claude-3-5-haiku-latest",
    "openai/<name>" with `api_base` for an OpenAI-compatible server such as a local one).
    The key is never stored here: `api_key_env` names the environment variable holding it
    (unset: litellm's own provider variables, such as OPENAI_API_KEY).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, max_length=200)
    api_base: str | None = Field(default=None, max_length=500)
    api_key_env: str | None = Field(
        default=None, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    timeout_s: float = Field(default=20.0, gt=0, le=600)
    max_retries: int = Field(
        default=1,
        ge=0,
        le=5,
        description="Extra requests after a timeout, refused connection or 5xx.",
    )
    retry_backoff_s: float = Field(default=0.5, ge=0, le=60)
    calls_per_hour: int | None = Field(
        default=30, ge=0, description="Requests per rolling hour (retries count); null: no limit."
    )
    usd_per_day: float | None = Field(
        default=1.0, ge=0, description="Spend per UTC day; null: no cap."
    )
    cooldown_s: float = Field(
        default=600.0, ge=0, le=86400, description="Pause after a 401 or a 429 before trying again."
    )
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=800, ge=16, le=16384)
    json_mode: bool = Field(default=True, description="Ask for a JSON object response format.")
    prompt: str = Field(default=DEFAULT_PROMPT, pattern=r"^[a-z0-9_-]+/v[0-9]+$")
    prompts_dir: str | None = None
    input_usd_per_mtok: float | None = Field(
        default=None, ge=0, description="Price override for models litellm has no price for."
    )
    output_usd_per_mtok: float | None = Field(default=None, ge=0)
    # Bounds applied to every answer, whatever the model says.
    max_forecasts: int = Field(default=4, ge=1, le=16)
    max_gpus: int = Field(default=64, ge=1, le=4096)
    max_gpus_factor: float = Field(
        default=2.0, ge=1, le=100, description="At most this times the user's largest job so far."
    )
    max_horizon_s: float = Field(default=6 * 3600.0, gt=0, le=7 * 86400)
    max_window_s: float = Field(default=2 * 3600.0, gt=0, le=7 * 86400)
    min_window_s: float = Field(default=60.0, ge=0, le=3600)
    # What the prompt may contain.
    max_events: int = Field(default=20, ge=1, le=200)
    max_excerpt_chars: int = Field(default=200, ge=0, le=2000)
