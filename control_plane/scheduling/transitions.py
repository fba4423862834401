"""Explicit state-transition tables for holds, allocations and nodes; an illegal move raises."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus

H = HoldStatus
A = AllocationStatus
N = NodeStatus

_HOLD_ENDINGS = frozenset({H.CANCELLED, H.EXPIRED, H.PREEMPTED, H.FAILED})

HOLD_TRANSITIONS: Mapping[HoldStatus, frozenset[HoldStatus]] = {
    # A requested hold has no GPUs yet, so there is nothing to preempt. Claimed before it is
    # placed, it becomes an ordinary reactive request.
    H.REQUESTED: frozenset({H.PLACED, H.CLAIMED, H.EXPIRED, H.CANCELLED, H.FAILED}),
    # placed -> ready directly when the hold has no warm-up to run. A job that comes before
    # the warm-up ends claims the hold anyway and starts when it ends (not a warm start).
    H.PLACED: frozenset({H.WARMING, H.READY, H.CLAIMED}) | _HOLD_ENDINGS,
    # warming/ready -> placed: re-placed on other GPUs after its node was lost; it warms again.
    H.WARMING: frozenset({H.READY, H.CLAIMED, H.PLACED}) | _HOLD_ENDINGS,
    H.READY: frozenset({H.CLAIMED, H.PLACED}) | _HOLD_ENDINGS,
    H.CLAIMED: frozenset(),
    H.EXPIRED: frozenset(),
    H.CANCELLED: frozenset(),
    H.PREEMPTED: frozenset(),
    H.FAILED: frozenset(),
}

ALLOCATION_TRANSITIONS: Mapping[AllocationStatus, frozenset[AllocationStatus]] = {
    A.PENDING: frozenset({A.ALLOCATED, A.CANCELLED, A.EXPIRED}),
    A.ALLOCATED: frozenset({A.RELEASED, A.EXPIRED, A.LOST}),
    A.RELEASED: frozenset(),
    A.EXPIRED: frozenset(),
    # lost -> allocated: its node came back within the lease with the GPUs still free.
    A.LOST: frozenset({A.ALLOCATED}),
    A.CANCELLED: frozenset(),
}

NODE_TRANSITIONS: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    # A node that never heartbeats after registering goes offline like any silent node.
    N.REGISTERING: frozenset({N.ONLINE, N.OFFLINE}),
    N.ONLINE: frozenset({N.DRAINING, N.OFFLINE}),
    # Draining can be undone by the node's next heartbeat without the draining flag.
    N.DRAINING: frozenset({N.ONLINE, N.OFFLINE}),
    # A heartbeat from an offline node brings it back.
    N.OFFLINE: frozenset({N.ONLINE}),
}

Kind = Literal["hold", "allocation", "node"]

Table = Mapping[Any, frozenset[Any]]

TABLES: Mapping[str, Table] = {
    "hold": HOLD_TRANSITIONS,
    "allocation": ALLOCATION_TRANSITIONS,
    "node": NODE_TRANSITIONS,
}


class IllegalTransition(ValueError):
    """A state change that the transition table does not allow."""

    def __init__(self, kind: str, current: str, new: str) -> None:
        super().__init__(f"{kind}: illegal transition {current} -> {new}")
        self.kind = kind
        self.current = current
        self.new = new


def _table(table_or_kind: Kind | Table) -> tuple[str, Table]:
    if isinstance(table_or_kind, str):
        try:
            return table_or_kind, TABLES[table_or_kind]
        except KeyError:
            raise ValueError(f"unknown state machine {table_or_kind!r}") from None
    for kind, table in TABLES.items():
        if table is table_or_kind:
            return kind, table
    return "state", table_or_kind


def allowed_next(table_or_kind: Kind | Table, current: str) -> frozenset[StrEnum]:
    """States reachable in one step from `current` (empty for a final state)."""
    kind, table = _table(table_or_kind)
    nexts = table.get(current)
    if nexts is None:
        raise ValueError(f"{kind}: unknown state {current!r}")
    return nexts


def is_final(table_or_kind: Kind | Table, current: str) -> bool:
    return not allowed_next(table_or_kind, current)


def can_transition(table_or_kind: Kind | Table, current: str, new: str) -> bool:
    return new in allowed_next(table_or_kind, current)


def check_transition(table_or_kind: Kind | Table, current: str, new: str) -> None:
    """Raise IllegalTransition unless `current -> new` is in the table (self-moves are not)."""
    kind, _ = _table(table_or_kind)
    if not can_transition(table_or_kind, current, new):
        raise IllegalTransition(kind, str(current), str(new))
