"""A node back within the lease: allocations lost when it went offline return to allocated."""

from __future__ import annotations

from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, AssignmentRow, EventRow, NodeRow
from control_plane.scheduling.fairshare import DEFAULT_HALF_LIFE_S, DecayedUsage, decay
from control_plane.schemas.enums import AllocationStatus, NodeStatus
from control_plane.services import lifecycle, placing, sql
from control_plane.services.events import move


def _went_offline_at(session: Session, node_id: str) -> float | None:
    return session.exec(
        select(EventRow.at)
        .where(
            EventRow.kind == "node",
            EventRow.object_id == node_id,
            EventRow.to_state == NodeStatus.OFFLINE.value,
        )
        .order_by(col(EventRow.at).desc())
        .limit(1)
    ).first()


def _refund_usage(session: Session, alloc: AllocationRow, *, charged_at: float, now: float) -> None:
    """Take back the usage charged when the allocation was lost: it is charged in full, from
    allocated_at, when it really ends. The charge has decayed since like the rest."""
    if alloc.allocated_at is None:
        return
    charged = alloc.gpu_count * max(0.0, charged_at - alloc.allocated_at)
    conn = session.connection()
    row = conn.execute(sql.READ_USAGE, {"tenant": alloc.tenant_id}).first()
    if row is None or charged <= 0:
        return
    usage = DecayedUsage(row[0], row[1])
    when = max(now, usage.at)
    left = usage.at_time(when) - decay(charged, when - charged_at, DEFAULT_HALF_LIFE_S)
    conn.execute(sql.WRITE_USAGE, {"tenant": alloc.tenant_id, "value": max(0.0, left), "at": when})


def returning_node(session: Session, node: NodeRow, *, now: float) -> list[str]:
    """Give back to each allocation lost when `node` went offline the GPUs it had, if its
    lease has not ended and all of them are still free on live nodes; the ids revived.

    The node's tasks may well have run on through a network cut or a stall of the server;
    ending them would punish the job for what it did not do. An allocation whose GPUs went
    to someone else meanwhile, or whose lease ended, stays lost.
    """
    offline_at = _went_offline_at(session, node.id)
    if offline_at is None:
        return []
    # Lost in the pass that took the node offline: its assignments ended at that moment.
    lost_ids = set(
        session.exec(
            select(AssignmentRow.allocation_id).where(
                AssignmentRow.node_id == node.id,
                AssignmentRow.ended_at == offline_at,
                col(AssignmentRow.allocation_id).is_not(None),
            )
        ).all()
    )
    if not lost_ids:
        return []
    session.flush()  # the node's move back online, for the placement view
    cluster = placing.load_cluster(session)
    revived: list[str] = []
    for alloc in session.exec(
        select(AllocationRow).where(col(AllocationRow.id).in_(lost_ids)).order_by(AllocationRow.id)
    ):
        if alloc.status != AllocationStatus.LOST.value or alloc.released_at != offline_at:
            continue
        if alloc.expires_at is not None and alloc.expires_at <= now:
            continue
        gpus = session.exec(
            select(AssignmentRow.gpu_uuid, AssignmentRow.node_id).where(
                AssignmentRow.allocation_id == alloc.id, AssignmentRow.ended_at == offline_at
            )
        ).all()
        if not gpus or not all(cluster.state.is_free(uuid) for uuid, _ in gpus):
            continue  # another node still away, a GPU unhealthy or given to someone else
        lifecycle.assign(session, gpus=[(u, n) for u, n in gpus], now=now, allocation_id=alloc.id)
        _refund_usage(session, alloc, charged_at=offline_at, now=now)
        alloc.released_at = None
        reason = f"node {node.name} came back within the lease"
        alloc.reason = reason
        move(session, alloc, "allocation", AllocationStatus.ALLOCATED.value, now=now, reason=reason)
        revived.append(alloc.id)
    return revived
