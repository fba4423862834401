"""Shared state-change steps inside a transaction: assign GPUs, end holds and allocations."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Row
from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, AssignmentRow, HoldRow, NodeRow
from control_plane.db.session import touch_nodes
from control_plane.scheduling.fairshare import DEFAULT_HALF_LIFE_S as HALF_LIFE_S
from control_plane.scheduling.transitions import check_transition
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus
from control_plane.services import placing, sql
from control_plane.services.events import move, record


def assign(
    session: Session,
    *,
    gpus: Sequence[tuple[str, str]],
    now: float,
    hold_id: str | None = None,
    allocation_id: str | None = None,
) -> None:
    """Set GPUs aside; `gpus` is (uuid, node_id) pairs. The unique index refuses a double."""
    placing.load_cluster(session).take([uuid for uuid, _ in gpus])
    sql.send(
        session,
        sql.INSERT_ASSIGNMENT,
        [
            {
                "gpu_uuid": uuid,
                "node_id": node_id,
                "hold_id": hold_id,
                "allocation_id": allocation_id,
                "started_at": now,
            }
            for uuid, node_id in gpus
        ],
    )
    placing.mark_changed(session)
    touch_nodes(session, {node_id for _, node_id in gpus})


def forget_loaded(session: Session, allocation_id: str) -> None:
    """Expire the ORM copy of an allocation loaded earlier in this transaction, if any: the
    Core statements about to change its row would leave that copy stale."""
    loaded = session.identity_map.get(session.identity_key(AllocationRow, allocation_id))
    if loaded is not None:
        session.expire(loaded)


def end_assignments(
    session: Session, *, now: float, hold_id: str | None = None, allocation_id: str | None = None
) -> list[str]:
    if (hold_id is None) == (allocation_id is None):
        raise ValueError("end_assignments needs exactly one of hold_id and allocation_id")
    statement = sql.END_HOLD_ASSIGNMENTS if hold_id is not None else sql.END_ALLOCATION_ASSIGNMENTS
    ended = sql.run(session, statement, {"owner": hold_id or allocation_id, "now": now}).fetchall()
    return freed(session, ended)


def end_hold_gpus(
    session: Session, *, hold_id: str, gpu_uuids: Sequence[str], now: float
) -> list[str]:
    """End the hold's assignments on these GPUs only (those a smaller claim gives back)."""
    ended = (
        session.connection()
        .execute(
            sql.END_HOLD_GPU_ASSIGNMENTS, {"owner": hold_id, "gpus": list(gpu_uuids), "now": now}
        )
        .all()
    )
    return freed(session, ended)


def freed(session: Session, ended: Sequence[Row[tuple[str, str]] | tuple[str, str]]) -> list[str]:
    """Keep this transaction's placement view in step with assignments just ended, given as
    (uuid, node id) rows; the GPUs."""
    freed = [uuid for uuid, _ in ended]
    if freed:
        placing.load_cluster(session).free(freed)
        placing.mark_changed(session)
        touch_nodes(session, {node_id for _, node_id in ended})
    return freed


def hold_idle_gpu_s(hold: HoldRow, until: float) -> float:
    """GPU-seconds a hold kept its GPUs from anyone while no job of its tenant used them."""
    if hold.placed_at is None:
        return 0.0
    return max(0.0, until - hold.placed_at) * hold.gpu_count


def end_hold(
    session: Session, hold: HoldRow, status: HoldStatus, *, now: float, reason: str | None = None
) -> None:
    # Fields first, then the state change: its event insert flushes them in one UPDATE.
    hold.ended_at = now
    hold.idle_gpu_s = hold_idle_gpu_s(hold, now)
    if reason:
        hold.reason = reason
    move(session, hold, "hold", status.value, now=now, reason=reason)
    if status != HoldStatus.CLAIMED:
        end_assignments(session, now=now, hold_id=hold.id)


def end_allocation(
    session: Session,
    alloc: AllocationRow,
    status: AllocationStatus,
    *,
    now: float,
    reason: str | None = None,
) -> list[str]:
    """End an allocation with `status`; the GPUs it freed."""
    alloc.released_at = now
    if reason:
        alloc.reason = reason
    move(session, alloc, "allocation", status.value, now=now, reason=reason)
    freed = end_assignments(session, now=now, allocation_id=alloc.id)
    if alloc.allocated_at is not None:
        charge_usage(session, alloc.tenant_id, alloc.gpu_count * (now - alloc.allocated_at), now)
    return freed


def charge_usage(session: Session, tenant_id: str, gpu_seconds: float, now: float) -> None:
    """Add finished work to the tenant's decayed usage, which orders the fair-share queue."""
    if gpu_seconds <= 0:
        return
    params = {"tenant": tenant_id, "now": now, "gpu_s": gpu_seconds, "half_life": HALF_LIFE_S}
    sql.send(session, sql.CHARGE_USAGE, params)


def move_node(
    session: Session, node: NodeRow, status: NodeStatus, *, now: float, reason: str | None = None
) -> None:
    check_transition("node", node.status, status.value)
    placing.mark_changed(session, inventory=True)
    record(
        session,
        kind="node",
        object_id=node.id,
        from_state=node.status,
        to_state=status.value,
        at=now,
        reason=reason,
    )
    node.status = status.value


def active_owners(
    session: Session, *, node_ids: Iterable[str] = (), uuids: Iterable[str] = ()
) -> dict[str, tuple[str, str, str]]:
    """What has an active assignment on these nodes' GPUs, or else on these GPUs: owner id ->
    ("allocation" | "hold", node id, GPU uuid) of one of its GPUs there. A claimed hold's GPUs
    belong to its allocation: the allocation decides their fate."""
    node_ids, uuids = list(node_ids), list(uuids)
    if not node_ids and not uuids:
        return {}
    where = (
        col(AssignmentRow.node_id).in_(node_ids)
        if node_ids
        else col(AssignmentRow.gpu_uuid).in_(uuids)
    )
    rows = session.exec(
        select(
            AssignmentRow.hold_id,
            AssignmentRow.allocation_id,
            AssignmentRow.node_id,
            AssignmentRow.gpu_uuid,
        ).where(col(AssignmentRow.ended_at).is_(None), where)
    ).all()
    owners: dict[str, tuple[str, str, str]] = {}
    for hold_id, alloc_id, node_id, uuid in rows:
        if alloc_id:
            owners[alloc_id] = ("allocation", node_id, uuid)
        elif hold_id:
            owners[hold_id] = ("hold", node_id, uuid)
    return owners


def fail_gpu_owners(session: Session, uuids: Iterable[str], *, now: float, reason: str) -> None:
    """Whatever holds these GPUs is broken: holds fail, allocations are lost."""
    owners = active_owners(session, uuids=uuids)
    alloc_ids = {o for o, (kind, _, _) in owners.items() if kind == "allocation"}
    hold_ids = {o for o, (kind, _, _) in owners.items() if kind == "hold"}
    for alloc in session.exec(select(AllocationRow).where(col(AllocationRow.id).in_(alloc_ids))):
        end_allocation(session, alloc, AllocationStatus.LOST, now=now, reason=reason)
    for hold in session.exec(select(HoldRow).where(col(HoldRow.id).in_(hold_ids))):
        end_hold(session, hold, HoldStatus.FAILED, now=now, reason=reason)
