"""Pure reconciler: given holds, allocations, nodes and `now`, the lifecycle actions now due."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from control_plane.scheduling.transitions import Kind, check_transition
from control_plane.schemas.enums import (
    ACTIVE_ALLOCATION_STATUSES,
    ACTIVE_HOLD_STATUSES,
    AllocationStatus,
    HoldStatus,
    NodeStatus,
)

DEFAULT_HEARTBEAT_TIMEOUT_S = 15.0


class ActionKind(StrEnum):
    ACTIVATE_HOLD = "activate_hold"
    EXPIRE_HOLD = "expire_hold"
    EXPIRE_ALLOCATION = "expire_allocation"
    MARK_NODE_OFFLINE = "mark_node_offline"


@dataclass(frozen=True, slots=True)
class HoldTiming:
    """A hold's window: placed and warmed from `start_at - lead_s`, claimable until `+ ttl_s`."""

    id: str
    status: HoldStatus
    start_at: float
    lead_s: float
    ttl_s: float

    @property
    def activate_at(self) -> float:
        return self.start_at - self.lead_s

    @property
    def expires_at(self) -> float:
        return self.start_at + self.ttl_s


@dataclass(frozen=True, slots=True)
class AllocationTiming:
    """An allocation and its lease end (None: until released)."""

    id: str
    status: AllocationStatus
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class NodeLiveness:
    """A node and when it was last heard from (registration counts as the first word)."""

    id: str
    status: NodeStatus
    last_heartbeat_at: float | None
    registered_at: float


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    target_id: str
    new_status: str
    due_at: float
    reason: str


_SILENT_NODE_STATUSES = frozenset({NodeStatus.REGISTERING, NodeStatus.ONLINE, NodeStatus.DRAINING})


def reconcile(
    holds: Iterable[HoldTiming],
    allocations: Iterable[AllocationTiming],
    nodes: Iterable[NodeLiveness],
    now: float,
    *,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
) -> list[Action]:
    """Every action due at `now`, ordered by due time, then kind, then id.

    Expiry wins over activation: a requested hold whose window has already closed expires
    instead of being placed. Every proposed move is legal in the transition tables.
    """
    actions: list[Action] = []
    for hold in holds:
        if hold.status not in ACTIVE_HOLD_STATUSES:
            continue
        if now >= hold.expires_at:
            actions.append(
                _checked(
                    "hold",
                    hold.status,
                    Action(
                        ActionKind.EXPIRE_HOLD,
                        hold.id,
                        HoldStatus.EXPIRED,
                        hold.expires_at,
                        "hold window ended unclaimed (start_at + ttl_s)",
                    ),
                )
            )
        elif hold.status == HoldStatus.REQUESTED and now >= hold.activate_at:
            actions.append(
                _checked(
                    "hold",
                    hold.status,
                    Action(
                        ActionKind.ACTIVATE_HOLD,
                        hold.id,
                        HoldStatus.PLACED,
                        hold.activate_at,
                        "lead time reached (start_at - lead_s): place and warm",
                    ),
                )
            )
    for alloc in allocations:
        if alloc.status not in ACTIVE_ALLOCATION_STATUSES or alloc.expires_at is None:
            continue
        if now >= alloc.expires_at:
            actions.append(
                _checked(
                    "allocation",
                    alloc.status,
                    Action(
                        ActionKind.EXPIRE_ALLOCATION,
                        alloc.id,
                        AllocationStatus.EXPIRED,
                        alloc.expires_at,
                        "lease ended",
                    ),
                )
            )
    for node in nodes:
        if node.status not in _SILENT_NODE_STATUSES:
            continue
        heard = node.registered_at if node.last_heartbeat_at is None else node.last_heartbeat_at
        due = heard + heartbeat_timeout_s
        if now >= due:
            actions.append(
                _checked(
                    "node",
                    node.status,
                    Action(
                        ActionKind.MARK_NODE_OFFLINE,
                        node.id,
                        NodeStatus.OFFLINE,
                        due,
                        f"no heartbeat for {heartbeat_timeout_s:g} s",
                    ),
                )
            )
    actions.sort(key=lambda a: (a.due_at, a.kind, a.target_id))
    return actions


def next_due(
    holds: Iterable[HoldTiming],
    allocations: Iterable[AllocationTiming],
    nodes: Iterable[NodeLiveness],
    *,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
) -> float | None:
    """The earliest time at which `reconcile` will have something to do (None: nothing ever)."""
    times: list[float] = []
    for hold in holds:
        if hold.status in ACTIVE_HOLD_STATUSES:
            times.append(hold.expires_at)
            if hold.status == HoldStatus.REQUESTED:
                times.append(hold.activate_at)
    for alloc in allocations:
        if alloc.status in ACTIVE_ALLOCATION_STATUSES and alloc.expires_at is not None:
            times.append(alloc.expires_at)
    for node in nodes:
        if node.status in _SILENT_NODE_STATUSES:
            heard = node.registered_at if node.last_heartbeat_at is None else node.last_heartbeat_at
            times.append(heard + heartbeat_timeout_s)
    return min(times) if times else None


def _checked(kind: Kind, current: str, action: Action) -> Action:
    check_transition(kind, current, action.new_status)
    return action
