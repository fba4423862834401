"""Allocations (a real job's GPUs) and holds (speculative, pre-warmed reservations)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from control_plane.schemas.common import (
    MAX_GPUS_PER_REQUEST,
    MAX_LEAD_S,
    MAX_LEASE_S,
    MAX_TTL_S,
    MULTILINE,
    GpuModel,
    JsonInt,
    Label,
    ObjectId,
    OptionalJsonInt,
    UtcDatetime,
    WireModel,
)
from control_plane.schemas.enums import (
    AllocationStatus,
    HoldSource,
    HoldStatus,
    JobClass,
    Strategy,
    TaskStatus,
)

# A command is argv: at most 64 words of at most 1,024 characters, bounds the schema states.
# A word may span lines (a script for `sh -c`) but holds no other control character.
CommandWord = Annotated[str, Field(max_length=1024), *MULTILINE]
Command = Annotated[list[CommandWord], Field(min_length=1, max_length=64)]


class AssignedGpu(BaseModel):
    uuid: str
    node: str
    node_id: str
    index: int | None = None


class AllocationCreate(WireModel):
    gpu_count: JsonInt = Field(ge=1, le=MAX_GPUS_PER_REQUEST)
    gpu_model: GpuModel | None = None
    lease_s: OptionalJsonInt = Field(
        default=None,
        ge=1,
        le=MAX_LEASE_S,
        description="Lease length; null means until release.",
    )
    hold_id: ObjectId | None = Field(default=None, description="Claim this hold.")
    use_holds: bool = Field(
        strict=True,
        default=True,
        description="Claim a matching warm hold of this tenant automatically.",
    )
    strategy: Strategy = Strategy.CONSOLIDATED
    job_class: JobClass = JobClass.BATCH
    command: Command | None = Field(
        default=None, description="Run this on the node with the GPUs visible."
    )
    warmup: Label | None = Field(
        default=None,
        description="Warm-up profile the node runs before the GPUs count as usable (a cold "
        "start measured into time_to_gpu_s).",
    )
    label: Label | None = None


class AllocationRenew(WireModel):
    lease_s: OptionalJsonInt = Field(
        default=None,
        ge=1,
        le=MAX_LEASE_S,
        description="New lease from now; default the allocation's own lease_s.",
    )


class Allocation(BaseModel):
    id: str
    tenant_id: str
    status: AllocationStatus
    gpu_count: int
    gpu_model: str | None
    gpus: list[AssignedGpu]
    hold_id: str | None
    warm: bool = Field(description="True when the GPUs were already warm (claimed a ready hold).")
    time_to_gpu_s: float | None = Field(
        description="Seconds from request to usable GPUs, when measured: a warm claim, or a "
        "warm-up the node reported. Null otherwise, with time_to_gpu_note saying why."
    )
    time_to_gpu_note: str | None = Field(
        default=None, description="Why time_to_gpu_s is null (e.g. a cold start not measured)."
    )
    requested_at: datetime
    allocated_at: datetime | None
    ready_at: datetime | None
    released_at: datetime | None
    expires_at: datetime | None
    lease_s: int | None
    strategy: Strategy
    job_class: JobClass
    label: str | None
    warmup: str | None = None
    command: list[str] | None
    task_status: TaskStatus | None
    exit_code: int | None
    output_tail: str | None
    reason: str | None
    preempted_holds: list[str] = Field(
        default_factory=list, description="Holds this allocation displaced to fit."
    )


class HoldCreate(WireModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"not": {"required": ["start_at", "start_in_s"]}}
    )

    gpu_count: JsonInt = Field(ge=1, le=MAX_GPUS_PER_REQUEST)
    gpu_model: GpuModel | None = None
    start_at: UtcDatetime | None = Field(
        default=None, description="When the job is expected; default now (or now + start_in_s)."
    )
    start_in_s: float | None = Field(
        strict=True,
        default=None,
        ge=0,
        le=MAX_TTL_S,
        description="Alternative to start_at, relative to now.",
    )
    ttl_s: JsonInt = Field(
        ge=1, le=MAX_TTL_S, description="Hold stays claimable until start_at + ttl_s."
    )
    lead_s: OptionalJsonInt = Field(
        default=None,
        ge=0,
        le=MAX_LEAD_S,
        description="Place and warm this long before start_at.",
    )
    confidence: float = Field(strict=True, default=1.0, ge=0.0, le=1.0)
    warmup: Label | None = Field(default=None, description="Warm-up profile the node runs.")
    source: HoldSource = HoldSource.MANUAL
    strategy: Strategy = Strategy.CONSOLIDATED
    label: Label | None = None

    @model_validator(mode="after")
    def _one_start(self) -> HoldCreate:
        # By key, as the schema's "not both required" says, whatever the values.
        if {"start_at", "start_in_s"} <= self.model_fields_set:
            raise ValueError("start_at: give start_at or start_in_s, not both")
        return self


class HoldClaim(WireModel):
    gpu_count: OptionalJsonInt = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_REQUEST,
        description="Take only this many of the hold's GPUs (at most its gpu_count); the "
        "rest are released at once. Default: all of them.",
    )
    lease_s: OptionalJsonInt = Field(default=None, ge=1, le=MAX_LEASE_S)
    command: Command | None = None
    label: Label | None = None
    job_class: JobClass = Field(
        default=JobClass.BATCH, description="Counted against this class's share of the quota."
    )
    strategy: Strategy | None = Field(
        default=None,
        description="Recorded on the allocation (and used to place it if the hold was never "
        "placed); default: the hold's.",
    )
    warmup: Label | None = Field(
        default=None,
        description="Warm-up profile when the hold has none of its own and its warm-up had "
        "not begun; default: the hold's.",
    )


class Hold(BaseModel):
    id: str
    tenant_id: str
    status: HoldStatus
    gpu_count: int
    gpu_model: str | None
    gpus: list[AssignedGpu]
    start_at: datetime
    ttl_s: int
    lead_s: int
    expires_at: datetime
    confidence: float
    source: HoldSource
    warmup: str | None
    strategy: Strategy
    label: str | None
    created_at: datetime
    placed_at: datetime | None
    ready_at: datetime | None
    warmup_s: float | None
    ended_at: datetime | None
    allocation_id: str | None
    reason: str | None
