"""State names and other closed vocabularies of the wire contract."""

from __future__ import annotations

from enum import StrEnum


class NodeStatus(StrEnum):
    REGISTERING = "registering"
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


class HoldStatus(StrEnum):
    REQUESTED = "requested"
    PLACED = "placed"
    WARMING = "warming"
    READY = "ready"
    CLAIMED = "claimed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    FAILED = "failed"


class AllocationStatus(StrEnum):
    PENDING = "pending"
    ALLOCATED = "allocated"
    RELEASED = "released"
    EXPIRED = "expired"
    LOST = "lost"
    CANCELLED = "cancelled"


class HoldSource(StrEnum):
    AGENT = "agent"
    MANUAL = "manual"
    WARM_POOL = "warm_pool"


class Scope(StrEnum):
    TENANT = "tenant"
    NODE = "node"
    ADMIN = "admin"


class Strategy(StrEnum):
    CONSOLIDATED = "consolidated"
    BALANCED = "balanced"
    DISTRIBUTED = "distributed"


class JobClass(StrEnum):
    ONLINE = "online"
    BATCH = "batch"


class TaskStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    STOPPED = "stopped"


ACTIVE_HOLD_STATUSES = frozenset(
    {HoldStatus.REQUESTED, HoldStatus.PLACED, HoldStatus.WARMING, HoldStatus.READY}
)
ACTIVE_ALLOCATION_STATUSES = frozenset({AllocationStatus.PENDING, AllocationStatus.ALLOCATED})
