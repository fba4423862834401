"""The smart agent's config (configs/smart-agent.yaml): where the control plane is, what to
watch, where the policy and the prediction log live, how often to think."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from smart_agent import userconf
from smart_agent.agent import ARRIVAL_MAX_AGE_S, JOB_LEASE_S
from smart_agent.sources import SourcesConfig
from smart_agent.yamlconf import ConfigError, load_model

DEFAULT_LOG = "~/.local/share/jitgpu/predictions.db"


class AgentConfig(SourcesConfig):
    """Inputs (user, watch, cues, processes, redact: see docs/smart-agent-inputs.md) plus:"""

    server: str = Field(default="http://127.0.0.1:8080", min_length=1, max_length=500)
    token_env: str = Field(
        default="JITGPU_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Environment variable holding the tenant's API key.",
    )
    policy: str = Field(
        default="prewarm-policy.yaml",
        description="Pre-warm policy file, relative to this config file.",
    )
    prediction_log: str = Field(default=DEFAULT_LOG)
    cycle_s: float = Field(default=60.0, ge=1, le=86400, description="Periodic cycle.")
    reconcile_s: float = Field(
        default=10.0, ge=0.5, le=3600, description="How often hold outcomes are fetched."
    )
    debounce_s: float = Field(
        default=10.0, ge=0, le=3600, description="Strong events within this fold into one cycle."
    )
    lease_s: int | None = Field(
        default=JOB_LEASE_S,
        ge=60,
        le=30 * 86400,
        description="Lease of every allocation the agent makes (claim or allocate_on_miss): "
        "a job whose end the agent misses gives its GPUs back when it ends. null: no lease.",
    )
    max_job_gpus: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Most GPUs one job may claim or allocate, and a forecast hold; default: "
        "the largest of the user's jobs seen so far, at least 4, at most the policy's "
        "max_gpus_total. A job asking for more is clamped to it (logged once per job).",
    )
    allocate_on_miss: bool = Field(
        default=False, description="When a job starts with no hold, allocate for it (cold)."
    )
    cancel_on_exit: bool = Field(
        default=False, description="Cancel the agent's holds on a clean stop."
    )
    arrival_max_age_s: float = Field(
        default=ARRIVAL_MAX_AGE_S,
        ge=1,
        le=86400,
        description="A job event older than this (or from before the agent started) is "
        "history only: it claims no hold and allocates nothing.",
    )


def _from(folder: Path, value: str) -> str:
    """A relative path in the config is relative to the config's folder, not the cwd."""
    expanded = Path(os.path.expanduser(value))
    return str(expanded if expanded.is_absolute() else folder / expanded)


def load_agent_config(path: str | Path) -> tuple[AgentConfig, Path]:
    """The config, and the policy file it names, with every path resolved against the
    config's folder: the agent reads the same files from whatever directory it starts in."""
    path = Path(path).expanduser().resolve()
    config = load_model(AgentConfig, path)
    config = config.model_copy(
        update={
            "prediction_log": _from(path.parent, config.prediction_log),
            "watch": [
                e.model_copy(update={"path": _from(path.parent, e.path)}) for e in config.watch
            ],
        }
    )
    policy = Path(os.path.expanduser(config.policy))
    if not policy.is_absolute():
        policy = path.parent / policy
    if not policy.exists():
        raise ConfigError([f"{path}: key 'policy': file {policy} does not exist"])
    return config, policy


def token_of(config: AgentConfig) -> str:
    """The API key from the variable named by token_env, else the one `jitgpu login` saved."""
    token = os.environ.get(config.token_env)
    if not token:
        try:
            token = userconf.load().token
        except userconf.CredentialsError as exc:
            raise ConfigError([str(exc)]) from None
    if not token:
        raise ConfigError(
            [
                f"environment variable {config.token_env} (the config's token_env) "
                "is not set and `jitgpu login` saved no API key: one of them must hold "
                "your jitgpu API key"
            ]
        )
    return token
