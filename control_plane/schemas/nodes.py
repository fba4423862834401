"""Node registration, heartbeats with telemetry, and the desired state a node agent pulls."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from control_plane.schemas.common import (
    MAX_GPUS_PER_NODE,
    PLAIN,
    SCRUB,
    GpuModel,
    JsonInt,
    Label,
    Name,
    NonEmptyLabel,
    OptionalJsonInt,
    ReportedText,
    WireModel,
)
from control_plane.schemas.enums import NodeStatus, TaskStatus

GpuUuid = Annotated[str, Field(min_length=1, max_length=96), *PLAIN]


class GpuSpec(WireModel):
    uuid: GpuUuid
    model: GpuModel
    memory_mb: JsonInt = Field(ge=0, le=10_000_000)
    index: OptionalJsonInt = Field(default=None, ge=0, le=1024)


class NodeRegister(WireModel):
    name: Name
    spine: NonEmptyLabel = "spine0"
    leaf: NonEmptyLabel = "leaf0"
    gpus: list[GpuSpec] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    agent_version: Label | None = None


class Gpu(BaseModel):
    uuid: str
    node_id: str
    node: str
    index: int | None
    model: str
    memory_mb: int
    healthy: bool
    assigned_to: str | None = Field(default=None, description="Hold or allocation id holding it.")
    telemetry: dict[str, float | int | str | bool | None] = Field(default_factory=dict)


class Node(BaseModel):
    id: str
    name: str
    spine: str
    leaf: str
    status: NodeStatus
    registered_at: datetime
    last_heartbeat_at: datetime | None
    gpus: list[Gpu]
    host: dict[str, float | int | None] = Field(default_factory=dict)
    heartbeat_port: int | None = Field(
        default=None,
        description="In the registration reply only: the port of this server's heartbeats-role "
        "process on the same host (`jitgpu server --heartbeat-port`); the node agent sends "
        "its heartbeats there unless it was given a heartbeat server.",
    )


class GpuTelemetry(WireModel):
    uuid: GpuUuid
    healthy: bool = Field(default=True, strict=True)
    reason: Annotated[str, Field(max_length=256), SCRUB] | None = None
    memory_used_mb: OptionalJsonInt = Field(default=None, ge=0, le=10_000_000)
    utilization_pct: float | None = Field(strict=True, default=None, ge=0, le=100)
    temperature_c: float | None = Field(strict=True, default=None, ge=-100, le=300)
    power_w: float | None = Field(strict=True, default=None, ge=0, le=100_000)
    ecc_uncorrected: OptionalJsonInt = Field(default=None, ge=0, le=2**31 - 1)


class HostTelemetry(WireModel):
    cpu_pct: float | None = Field(strict=True, default=None, ge=0, le=100 * 1024)
    memory_pct: float | None = Field(strict=True, default=None, ge=0, le=100)
    cache_disk_free_mb: OptionalJsonInt = Field(default=None, ge=0, le=2**53)


class Heartbeat(WireModel):
    gpus: list[GpuTelemetry] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    host: HostTelemetry | None = None
    draining: bool = Field(default=False, strict=True)


class NodeAssignment(BaseModel):
    """One thing the node must keep true: a hold to warm and keep, or an allocation to serve."""

    kind: str = Field(description="hold | allocation")
    id: str
    status: str
    gpu_uuids: list[str]
    warmup: str | None = None
    command: list[str] | None = None
    task_status: str | None = Field(
        default=None, description="Last task status the node reported (allocations only)."
    )
    expires_at: datetime | None = None
    start_at: datetime | None = Field(
        default=None, description="When the hold's job is expected (holds only)."
    )
    tenant: str | None = Field(
        default=None,
        description="The hold's tenant name (holds only): a scheduler backend maps it to the "
        "scheduler's user or account that may use the held GPUs.",
    )
    hold_id: str | None = Field(
        default=None,
        description="The hold this allocation claimed (allocations only): a scheduler backend "
        "keeps that hold's reservation until the claiming job runs in it.",
    )


class HeartbeatReply(BaseModel):
    node_id: str
    status: NodeStatus
    assignments: list[NodeAssignment]
    epoch: int | None = Field(
        default=None,
        description="Cluster epoch the assignments are as of: a reply with a lower epoch than "
        "one already applied is older and is dropped.",
    )
    rotate_credential: bool = Field(
        default=False,
        description="An administrator asked this node to rotate its credential "
        "(POST /v1/nodes/{id}/credentials).",
    )


class NodeWork(HeartbeatReply):
    """A node's desired state from its long poll, with the version to pass to the next one."""

    version: str


class WarmupReport(WireModel):
    ok: bool = Field(strict=True)
    warmup_s: float = Field(strict=True, ge=0, le=86400)
    exit_code: OptionalJsonInt = Field(default=None, ge=-(2**31), le=2**31 - 1)
    output_tail: ReportedText | None = None
    started: bool = Field(
        strict=True, default=False, description="True when warming has only started."
    )


class TaskReport(WireModel):
    status: TaskStatus
    exit_code: OptionalJsonInt = Field(default=None, ge=-(2**31), le=2**31 - 1)
    output_tail: ReportedText | None = None
