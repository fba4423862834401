"""The reconciler with a fixed `now`: activation, expiry, lease end, silent nodes."""

from __future__ import annotations

from control_plane.scheduling.lifecycle import (
    Action,
    ActionKind,
    AllocationTiming,
    HoldTiming,
    NodeLiveness,
    next_due,
    reconcile,
)
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus

NOW = 1_000_000.0


def _kinds(actions: list[Action]) -> list[tuple[str, str]]:
    return [(a.kind, a.target_id) for a in actions]


def test_requested_hold_activates_at_start_minus_lead() -> None:
    early = HoldTiming("h1", HoldStatus.REQUESTED, start_at=NOW + 61, lead_s=60, ttl_s=300)
    due = HoldTiming("h2", HoldStatus.REQUESTED, start_at=NOW + 60, lead_s=60, ttl_s=300)
    actions = reconcile([early, due], [], [], NOW)
    assert _kinds(actions) == [(ActionKind.ACTIVATE_HOLD, "h2")]
    assert actions[0].new_status == HoldStatus.PLACED and actions[0].due_at == NOW


def test_hold_expires_at_start_plus_ttl_in_any_active_state() -> None:
    holds = [
        HoldTiming(f"h-{s}", s, start_at=NOW - 300, lead_s=60, ttl_s=300)
        for s in (HoldStatus.REQUESTED, HoldStatus.PLACED, HoldStatus.WARMING, HoldStatus.READY)
    ]
    holds.append(HoldTiming("live", HoldStatus.READY, start_at=NOW - 299, lead_s=60, ttl_s=300))
    holds.append(HoldTiming("done", HoldStatus.CLAIMED, start_at=NOW - 900, lead_s=0, ttl_s=1))
    actions = reconcile(holds, [], [], NOW)
    assert {a.target_id for a in actions} == {"h-requested", "h-placed", "h-warming", "h-ready"}
    assert all(a.kind == ActionKind.EXPIRE_HOLD and a.new_status == "expired" for a in actions)


def test_allocation_expires_at_lease_end_only() -> None:
    allocations = [
        AllocationTiming("due", AllocationStatus.ALLOCATED, expires_at=NOW),
        AllocationTiming("later", AllocationStatus.ALLOCATED, expires_at=NOW + 1),
        AllocationTiming("open", AllocationStatus.ALLOCATED, expires_at=None),
        AllocationTiming("gone", AllocationStatus.RELEASED, expires_at=NOW - 10),
        AllocationTiming("waiting", AllocationStatus.PENDING, expires_at=NOW - 1),
    ]
    actions = reconcile([], allocations, [], NOW)
    assert _kinds(actions) == [
        (ActionKind.EXPIRE_ALLOCATION, "waiting"),
        (ActionKind.EXPIRE_ALLOCATION, "due"),
    ]


def test_silent_node_goes_offline_after_the_heartbeat_timeout() -> None:
    nodes = [
        NodeLiveness("quiet", NodeStatus.ONLINE, last_heartbeat_at=NOW - 15, registered_at=0),
        NodeLiveness("fresh", NodeStatus.ONLINE, last_heartbeat_at=NOW - 14, registered_at=0),
        NodeLiveness("new", NodeStatus.REGISTERING, last_heartbeat_at=None, registered_at=NOW - 20),
        NodeLiveness("off", NodeStatus.OFFLINE, last_heartbeat_at=NOW - 900, registered_at=0),
        NodeLiveness("drain", NodeStatus.DRAINING, last_heartbeat_at=NOW - 60, registered_at=0),
    ]
    actions = reconcile([], [], nodes, NOW, heartbeat_timeout_s=15)
    assert _kinds(actions) == [
        (ActionKind.MARK_NODE_OFFLINE, "drain"),
        (ActionKind.MARK_NODE_OFFLINE, "new"),
        (ActionKind.MARK_NODE_OFFLINE, "quiet"),
    ]


def test_next_due_is_the_earliest_pending_deadline() -> None:
    holds = [HoldTiming("h", HoldStatus.REQUESTED, start_at=NOW + 100, lead_s=30, ttl_s=60)]
    allocations = [AllocationTiming("a", AllocationStatus.ALLOCATED, expires_at=NOW + 500)]
    nodes = [NodeLiveness("n", NodeStatus.ONLINE, last_heartbeat_at=NOW, registered_at=0)]
    assert next_due(holds, allocations, nodes, heartbeat_timeout_s=15) == NOW + 15
    assert next_due(holds, allocations, []) == NOW + 70
    assert next_due([], [], []) is None
    # Nothing is due until that time, and something is due at it.
    assert reconcile(holds, allocations, [], NOW + 69.9) == []
    assert reconcile(holds, allocations, [], NOW + 70)
