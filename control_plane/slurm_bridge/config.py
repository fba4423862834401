"""Slurm-bridge settings: the YAML file (configs/slurm-bridge.yaml), then JITGPU_* variables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from control_plane.node_agent.config import ConfigError, describe, read_mapping
from control_plane.schemas.common import GpuModel

ENV_KEYS = {"JITGPU_SERVER": "server", "JITGPU_NODE_TOKEN": "token"}

__all__ = ["BridgeConfig", "ConfigError", "SlurmAccount", "load_config"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SlurmAccount(_Strict):
    """Who may use a tenant's held nodes in Slurm: a user list, an account, or both."""

    users: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.,-]+$")
    account: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.,-]+$")

    @model_validator(mode="after")
    def _one_of(self) -> SlurmAccount:
        if not self.users and not self.account:
            raise ValueError("give users or account (or both)")
        return self


class BridgeConfig(_Strict):
    server: str = Field(default="http://127.0.0.1:8080", min_length=1)
    token: str | None = Field(
        default=None,
        description="Enrols a Slurm node that has no enrolment token of its own in "
        "enrol_tokens (the admin token, once, at set-up); never used once nodes are enrolled.",
    )
    enrol_tokens: dict[str, str] = Field(
        default_factory=dict,
        description="Slurm node name -> its enrolment token (jitgpu admin node-token NAME).",
    )
    credentials_dir: Path | None = Field(
        default=None,
        description="Each node's own credential is kept here after enrolment (one file per "
        "node, readable by the bridge only); without it credentials live in memory.",
    )
    slurm_conf: Path | None = Field(
        default=None, description="SLURM_CONF for the client commands (default: Slurm's own)."
    )
    poll_s: float = Field(default=2.0, gt=0, le=300)
    reservation_prefix: str = Field(default="jitgpu-", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    partitions: list[str] | None = Field(
        default=None, description="Only nodes of these partitions (default: every GPU node)."
    )
    gpu_model: GpuModel = "slurm-gpu"
    gpu_memory_mb: int = Field(default=0, ge=0, le=10_000_000)
    resume_latency_s: float = Field(
        default=300.0,
        ge=0,
        le=86400,
        description="Boot time of a powered-down node until measured; a power-up starts this "
        "long before the hold's start_at (the bridge then uses what it measures).",
    )
    tenants: dict[str, SlurmAccount] = Field(
        default_factory=dict,
        description="jitgpu tenant name -> Slurm users/account allowed in its reservations.",
    )
    tenant_is_user: bool = Field(
        default=False,
        description="A tenant missing from `tenants` maps to the Slurm user of the same name.",
    )
    state_file: Path | None = Field(
        default=None,
        description="Remembers the holds the bridge reserved, so that a reservation deleted "
        "by an admin while the bridge was down is not made again.",
    )

    def account_for(self, tenant: str | None) -> SlurmAccount | None:
        if tenant is None:
            return None
        if tenant in self.tenants:
            return self.tenants[tenant]
        return SlurmAccount(users=tenant) if self.tenant_is_user else None


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> BridgeConfig:
    data: dict[str, Any] = {} if path is None else read_mapping(path)
    source = "slurm-bridge settings" if path is None else str(path)
    environ = os.environ if env is None else env
    data.update({key: environ[var] for var, key in ENV_KEYS.items() if environ.get(var)})
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return BridgeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None
