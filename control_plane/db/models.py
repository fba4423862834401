"""SQLModel tables of the control plane; times are float epoch seconds (UTC)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

# 64-bit ids on PostgreSQL (a busy cluster writes billions of events); SQLite needs plain
# INTEGER for its auto-incrementing row id, and its integers are 64-bit anyway.
BigId = BigInteger().with_variant(Integer, "sqlite")


class TenantRow(SQLModel, table=True):
    __tablename__ = "tenant"

    id: str = Field(primary_key=True)
    name: str = Field(unique=True)
    quota_gpus: int
    burst_gpus: int = 0
    # Share of quota_gpus guaranteed to online allocations, the rest to batch; None: no split.
    online_share: float | None = None
    weight: float = 1.0
    created_at: float
    # Server-side pre-warm policy (the speculative budget), enforced on every hold.
    max_held_gpus: int = 8
    max_idle_gpu_hours_per_day: float = 8.0
    max_hold_ttl_s: int = 3600
    allowed_warmups: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    holds_may_preempt_holds: bool = False
    # Idle over busy (beyond reactive) the tenant's agents steer to; None: not set.
    idle_budget: float | None = None
    # Decayed GPU-seconds used, as of usage_at: the input of weighted fair share.
    usage_gpu_s: float = 0.0
    usage_at: float = 0.0


class ApiKeyRow(SQLModel, table=True):
    __tablename__ = "api_key"

    id: str = Field(primary_key=True)
    key_hash: str = Field(unique=True)
    prefix: str
    scope: str
    tenant_id: str | None = Field(default=None, foreign_key="tenant.id", index=True)
    label: str | None = None
    created_at: float
    revoked_at: float | None = None
    # A node credential acts only as this node; None on tenant and admin keys (and on node
    # tokens from before node identity, which may only enrol).
    node_id: str | None = Field(default=None, index=True)


class EnrolTokenRow(SQLModel, table=True):
    """An admin-issued token that lets one named node enrol once (or until it expires)."""

    __tablename__ = "enrol_token"

    id: str = Field(primary_key=True)
    token_hash: str = Field(unique=True)
    prefix: str
    node_name: str
    label: str | None = None
    single_use: bool = True
    created_at: float
    expires_at: float
    used_at: float | None = None
    revoked_at: float | None = None


class NodeRow(SQLModel, table=True):
    __tablename__ = "node"

    id: str = Field(primary_key=True)
    name: str = Field(unique=True)
    spine: str
    leaf: str
    status: str
    registered_at: float
    last_heartbeat_at: float | None = None
    agent_version: str | None = None
    # When an administrator drained the node (None: not drained). It stays draining, whatever
    # its heartbeats say, until undrained.
    drain_requested_at: float | None = None
    # An administrator asked the node to rotate its credential: its next heartbeat says so.
    rotate_requested_at: float | None = None
    # Latest heartbeat's telemetry (host and per GPU), one JSON document so that a heartbeat
    # is a single-row update.
    telemetry_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class GpuRow(SQLModel, table=True):
    __tablename__ = "gpu"

    uuid: str = Field(primary_key=True)
    node_id: str = Field(foreign_key="node.id", index=True)
    index: int | None = None
    model: str
    memory_mb: int
    healthy: bool = True
    health_reason: str | None = None
    # A GPU that vanished from its node's registration stays for history, out of placement.
    present: bool = True


class HoldRow(SQLModel, table=True):
    __tablename__ = "hold"
    __table_args__ = (
        Index("ix_hold_tenant_status", "tenant_id", "status"),
        Index("ix_hold_tenant_created", "tenant_id", "created_at"),
        # A tenant's holds that ended within the idle budget's window (migration 0007).
        Index("ix_hold_tenant_ended", "tenant_id", "ended_at"),
    )

    id: str = Field(primary_key=True)
    tenant_id: str = Field(foreign_key="tenant.id")
    status: str = Field(index=True)
    gpu_count: int
    gpu_model: str | None = None
    start_at: float
    ttl_s: int
    lead_s: int
    expires_at: float
    confidence: float
    source: str
    warmup: str | None = None
    strategy: str
    label: str | None = None
    created_at: float
    placed_at: float | None = None
    ready_at: float | None = None
    warmup_s: float | None = None
    ended_at: float | None = None
    allocation_id: str | None = None
    reason: str | None = None
    # GPU-seconds this hold sat set aside without a job: charged to the idle budget on end.
    idle_gpu_s: float = 0.0


class AllocationRow(SQLModel, table=True):
    __tablename__ = "allocation"
    __table_args__ = (
        # The head of a tenant's queue in order, and (as a prefix) what a tenant runs or has
        # waiting (migration 0006).
        Index("ix_allocation_queue", "tenant_id", "status", "requested_at", "id"),
        Index("ix_allocation_tenant_requested", "tenant_id", "requested_at"),
        # A tenant's allocations released within the idle budget's window (migration 0007).
        Index("ix_allocation_tenant_released", "tenant_id", "released_at"),
    )

    id: str = Field(primary_key=True)
    tenant_id: str = Field(foreign_key="tenant.id")
    status: str = Field(index=True)
    gpu_count: int
    gpu_model: str | None = None
    hold_id: str | None = None
    warm: bool = False
    requested_at: float
    allocated_at: float | None = None
    ready_at: float | None = None
    released_at: float | None = None
    expires_at: float | None = None
    lease_s: int | None = None
    strategy: str
    job_class: str
    label: str | None = None
    warmup: str | None = None
    command_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    task_status: str | None = None
    exit_code: int | None = None
    output_tail: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    reason: str | None = None
    preempted_json: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class AssignmentRow(SQLModel, table=True):
    """A GPU set aside for a hold or an allocation; the active rows are the ground truth.

    The partial unique index makes the database refuse a second active row for one GPU, so a
    GPU can never be in two active holds/allocations, whatever the code above does.
    """

    __tablename__ = "assignment"
    __table_args__ = (
        Index(
            "ux_assignment_active_gpu",
            "gpu_uuid",
            unique=True,
            sqlite_where=text("ended_at IS NULL"),
            postgresql_where=text("ended_at IS NULL"),
        ),
        Index("ix_assignment_hold", "hold_id"),
        Index("ix_assignment_allocation", "allocation_id"),
        Index("ix_assignment_node_active", "node_id", "ended_at"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BigId)
    gpu_uuid: str = Field(foreign_key="gpu.uuid")
    node_id: str
    hold_id: str | None = None
    allocation_id: str | None = None
    started_at: float
    ended_at: float | None = None


class EventRow(SQLModel, table=True):
    __tablename__ = "event"
    __table_args__ = (Index("ix_event_object", "object_id"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BigId)
    at: float = Field(index=True)
    kind: str
    object_id: str
    tenant_id: str | None = None
    from_state: str | None = None
    to_state: str
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class IdempotencyRow(SQLModel, table=True):
    __tablename__ = "idempotency"
    __table_args__ = (UniqueConstraint("principal", "key", name="uq_idempotency_principal_key"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BigId)
    principal: str
    key: str
    request_hash: str
    status_code: int
    body: str = Field(sa_column=Column(Text, nullable=False))
    created_at: float = Field(index=True)


class LeaseRow(SQLModel, table=True):
    """A named lease with expiry: which replica runs the periodic jobs (leader election)."""

    __tablename__ = "lease"

    name: str = Field(primary_key=True)
    holder: str
    expires_at: float


class ClusterEpochRow(SQLModel, table=True):
    """One row, bumped by every transaction that changes assignments or the GPU inventory.

    A replica keeps its placement view in memory and rebuilds it only when the epoch it
    read differs from the one its view was built at.
    """

    __tablename__ = "cluster_epoch"

    id: int = Field(primary_key=True)
    value: int = Field(default=0, sa_type=BigInteger)
