"""Tenants, their API keys and their control-plane pre-warm policy."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from control_plane.schemas.common import (
    MAX_QUOTA_GPUS,
    MAX_TTL_S,
    JsonInt,
    Label,
    Name,
    NonEmptyLabel,
    OptionalJsonInt,
    WireModel,
)
from control_plane.schemas.enums import Scope


class TenantCreate(WireModel):
    name: Name
    quota_gpus: JsonInt = Field(ge=0, le=MAX_QUOTA_GPUS, description="Guaranteed GPUs.")
    burst_gpus: JsonInt = Field(
        default=0,
        ge=0,
        le=MAX_QUOTA_GPUS,
        description="GPUs above the quota when idle ones exist.",
    )
    online_share: float | None = Field(
        strict=True,
        default=None,
        ge=0,
        le=1,
        description=(
            "Share of quota_gpus guaranteed to online allocations, the rest to batch (largest "
            "remainder: no GPU stranded); a class may borrow the other's idle share, and gives "
            "it back by queueing the other class's requests until it does. null: no split."
        ),
    )
    weight: float = Field(strict=True, default=1.0, gt=0, le=1000, description="Fair-share weight.")


class TenantUpdate(WireModel):
    quota_gpus: OptionalJsonInt = Field(default=None, ge=0, le=MAX_QUOTA_GPUS)
    burst_gpus: OptionalJsonInt = Field(default=None, ge=0, le=MAX_QUOTA_GPUS)
    online_share: float | None = Field(
        strict=True, default=None, ge=0, le=1, description="An explicit null removes the split."
    )
    weight: float | None = Field(strict=True, default=None, gt=0, le=1000)


class Tenant(BaseModel):
    id: str
    name: str
    quota_gpus: int
    burst_gpus: int
    online_share: float | None = None
    weight: float
    created_at: datetime


class ApiKeyCreate(WireModel):
    label: Label | None = None


class ApiKeyCreated(BaseModel):
    id: str
    key: str = Field(description="The secret. Shown once; only its hash is stored.")
    prefix: str
    scope: Scope
    tenant_id: str | None
    label: str | None
    created_at: datetime


class ApiKeyInfo(BaseModel):
    id: str
    prefix: str = Field(description="First characters of the key, to tell keys apart.")
    scope: Scope
    tenant_id: str | None
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


class TenantPolicy(WireModel):
    """Server-side limits on a tenant's speculative holds, enforced whatever an agent asks."""

    max_held_gpus: JsonInt = Field(
        default=8, ge=0, le=MAX_QUOTA_GPUS, description="GPUs in active holds at once."
    )
    max_idle_gpu_hours_per_day: float = Field(
        strict=True,
        default=8.0,
        ge=0,
        le=1_000_000,
        description="Held-but-unclaimed GPU-hours per UTC day.",
    )
    max_hold_ttl_s: JsonInt = Field(default=3600, ge=1, le=MAX_TTL_S)
    allowed_warmups: list[NonEmptyLabel] | None = Field(
        default=None, max_length=64, description="Warm-up profiles allowed; null allows any."
    )
    holds_may_preempt_holds: bool = Field(
        strict=True,
        default=False,
        description="Whether this tenant's confident holds may displace weaker ones.",
    )
    idle_budget: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description="Idle GPU-hours per busy GPU-hour, over reactive, the tenant's agents "
        "steer their pre-warming to (their price controller); null: none set.",
    )


class TenantPolicyInfo(TenantPolicy):
    tenant_id: str
    held_gpus: JsonInt = Field(description="GPUs in this tenant's active holds now.")
    idle_gpu_hours_today: float = Field(
        strict=True, description="Idle held GPU-hours charged today (UTC)."
    )
    idle_ratio: float | None = Field(
        default=None,
        description="Realised idle over the last idle_window_s: held-but-unclaimed GPU-seconds "
        "(a claimed hold's own warm-up not counted) per GPU-second of allocations; null "
        "while nothing ran.",
    )
    idle_window_s: float = Field(default=86400.0, description="The window idle_ratio covers.")
    idle_window_gpu_hours: float = Field(
        default=0.0, description="Idle held GPU-hours beyond reactive in the window."
    )
    busy_window_gpu_hours: float = Field(
        default=0.0, description="GPU-hours of this tenant's allocations in the window."
    )
    over_idle_budget: bool = Field(
        default=False, description="Whether new holds are refused now for idle_budget."
    )
