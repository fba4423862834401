"""Work on GPUs that left placement: holds re-placed or failed, allocations lost or warned."""

from __future__ import annotations

from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, HoldRow, NodeRow, TenantRow
from control_plane.scheduling.lifecycle import ActionKind, NodeLiveness, reconcile
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus
from control_plane.services import holds, lifecycle, periodic, placing
from control_plane.services.events import note

# Nodes whose silence counts: an offline node has nothing left to take offline.
WATCHED_NODE_STATUSES = (
    NodeStatus.ONLINE.value,
    NodeStatus.DRAINING.value,
    NodeStatus.REGISTERING.value,
)


def replace_or_fail(session: Session, reasons: dict[str, str], *, now: float) -> int:
    """Holds whose GPUs left placement (hold id -> why): re-placed on free GPUs when they fit,
    else failed.

    The most confident holds choose first, whichever node or GPU they lost. Returns how many
    were re-placed.
    """
    hold_rows = session.exec(select(HoldRow).where(col(HoldRow.id).in_(list(reasons)))).all()
    if not hold_rows:
        return 0
    for hold in hold_rows:
        lifecycle.end_assignments(session, now=now, hold_id=hold.id)
    session.flush()
    cluster = placing.load_cluster(session)
    tenants = {
        t.id: t
        for t in session.exec(
            select(TenantRow).where(col(TenantRow.id).in_({h.tenant_id for h in hold_rows}))
        )
    }
    moved = 0
    for hold in sorted(hold_rows, key=lambda h: (-h.confidence, h.created_at, h.id)):
        reason = reasons[hold.id]
        if holds.replace_hold(
            session, cluster, hold, tenants[hold.tenant_id], now=now, reason=reason
        ):
            moved += 1
            continue
        lifecycle.end_hold(
            session,
            hold,
            HoldStatus.FAILED,
            now=now,
            reason=f"{reason}; no capacity to re-place it",
        )
    return moved


def _split(owners: dict[str, tuple[str, str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """Owners by kind: allocation ids and hold ids, each with where it lost a GPU."""
    allocs = {o: where for o, (kind, where, _) in owners.items() if kind == "allocation"}
    held = {o: where for o, (kind, where, _) in owners.items() if kind == "hold"}
    return allocs, held


def take_silent_nodes_offline(session: Session, *, now: float, timeout_s: float) -> int:
    """Nodes silent for `timeout_s` (as the pure reconciler judges) go offline; their
    allocations are lost, holds moved."""
    liveness = [
        NodeLiveness(id=i, status=NodeStatus(st), last_heartbeat_at=heard, registered_at=joined)
        for i, st, heard, joined in session.exec(
            select(
                NodeRow.id, NodeRow.status, NodeRow.last_heartbeat_at, NodeRow.registered_at
            ).where(col(NodeRow.status).in_(WATCHED_NODE_STATUSES))
        )
    ]
    due = periodic.due_targets(reconcile((), (), liveness, now, heartbeat_timeout_s=timeout_s))
    silent = sorted(
        periodic.rows_of(session, NodeRow, due[ActionKind.MARK_NODE_OFFLINE]), key=lambda n: n.name
    )
    if not silent:
        return 0
    # All of them leave placement before any hold is re-placed, so that no hold moves onto
    # another node that is going offline in the same pass.
    for node in silent:
        lifecycle.move_node(
            session, node, NodeStatus.OFFLINE, now=now, reason=f"no heartbeat for {timeout_s:g}s"
        )
    why = {node.id: f"node {node.name} went offline" for node in silent}
    allocs, held = _split(lifecycle.active_owners(session, node_ids=why))
    for alloc in session.exec(select(AllocationRow).where(col(AllocationRow.id).in_(list(allocs)))):
        lifecycle.end_allocation(
            session, alloc, AllocationStatus.LOST, now=now, reason=why[allocs[alloc.id]]
        )
    replace_or_fail(session, {h: why[node_id] for h, node_id in held.items()}, now=now)
    return len(silent)


def unhealthy_gpus(session: Session, reasons: dict[str, str], *, now: float) -> None:
    """GPUs that went unhealthy (uuid -> reason): their holds move or fail; running work stays.

    An allocation on such a GPU is not ended (its job may still be fine, and only the job's
    owner can judge); it gets an event so that the owner and the operators see why.
    """
    if not reasons:
        return
    owners = lifecycle.active_owners(session, uuids=reasons)
    why = {o: f"GPU {uuid} unhealthy: {reasons[uuid]}" for o, (_, _, uuid) in owners.items()}
    allocs, held = _split(owners)
    for alloc in session.exec(select(AllocationRow).where(col(AllocationRow.id).in_(list(allocs)))):
        note(session, alloc, "allocation", now=now, reason=why[alloc.id])
    replace_or_fail(session, {h: why[h] for h in held}, now=now)
