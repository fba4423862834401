"""Work on GPUs that left placement: holds re-placed or failed, allocations lost or warned."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, AssignmentRow, HoldRow, NodeRow, TenantRow
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus
from control_plane.services import holds, lifecycle, placing
from control_plane.services.events import record

# Nodes whose silence counts: an offline node has nothing left to take offline.
WATCHED_NODE_STATUSES = (
    NodeStatus.ONLINE.value,
    NodeStatus.DRAINING.value,
    NodeStatus.REGISTERING.value,
)


def _owners(
    session: Session, *, node_id: str | None = None, uuids: Sequence[str] = ()
) -> tuple[set[str], set[str]]:
    """Allocation ids and (unclaimed) hold ids with an active assignment on these GPUs."""
    query = select(AssignmentRow.hold_id, AssignmentRow.allocation_id).where(
        col(AssignmentRow.ended_at).is_(None)
    )
    if node_id is not None:
        query = query.where(AssignmentRow.node_id == node_id)
    else:
        query = query.where(col(AssignmentRow.gpu_uuid).in_(list(uuids)))
    rows = session.exec(query).all()
    # A claimed hold's GPUs belong to its allocation: the allocation decides their fate.
    return {a for _, a in rows if a}, {h for h, a in rows if h and not a}


def replace_or_fail(session: Session, hold_ids: Iterable[str], *, now: float, reason: str) -> int:
    """Holds whose GPUs left placement: re-placed on free GPUs when they fit, else failed.

    The most confident holds choose first. Returns how many were re-placed.
    """
    hold_rows = session.exec(select(HoldRow).where(col(HoldRow.id).in_(list(hold_ids)))).all()
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


def take_silent_nodes_offline(session: Session, *, now: float, timeout_s: float) -> int:
    """Nodes silent for `timeout_s` go offline; their allocations are lost, holds moved."""
    silent = session.exec(
        select(NodeRow)
        .where(
            col(NodeRow.status).in_(WATCHED_NODE_STATUSES),
            col(NodeRow.last_heartbeat_at) < now - timeout_s,
        )
        .order_by(col(NodeRow.name))
    ).all()
    # All of them leave placement before any hold is re-placed, so that no hold moves onto
    # another node that is going offline in the same pass.
    for node in silent:
        lifecycle.move_node(
            session, node, NodeStatus.OFFLINE, now=now, reason=f"no heartbeat for {timeout_s:g}s"
        )
    for node in silent:
        reason = f"node {node.name} went offline"
        alloc_ids, hold_ids = _owners(session, node_id=node.id)
        for alloc in session.exec(
            select(AllocationRow).where(col(AllocationRow.id).in_(alloc_ids))
        ):
            lifecycle.end_allocation(session, alloc, AllocationStatus.LOST, now=now, reason=reason)
        replace_or_fail(session, hold_ids, now=now, reason=reason)
    return len(silent)


def unhealthy_gpus(session: Session, reasons: dict[str, str], *, now: float) -> None:
    """GPUs that went unhealthy (uuid -> reason): their holds move or fail; running work stays.

    An allocation on such a GPU is not ended (its job may still be fine, and only the job's
    owner can judge); it gets an event so that the owner and the operators see why.
    """
    if not reasons:
        return
    for uuid, why in sorted(reasons.items()):
        alloc_ids, hold_ids = _owners(session, uuids=[uuid])
        message = f"GPU {uuid} unhealthy: {why}"
        for alloc in session.exec(
            select(AllocationRow).where(col(AllocationRow.id).in_(alloc_ids))
        ):
            record(
                session,
                kind="allocation",
                object_id=alloc.id,
                tenant_id=alloc.tenant_id,
                from_state=alloc.status,
                to_state=alloc.status,
                at=now,
                reason=message,
            )
        replace_or_fail(session, hold_ids, now=now, reason=message)
