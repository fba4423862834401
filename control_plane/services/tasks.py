"""Tasks: an allocation's command run by the node agent; its exit releases the GPUs."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row
from sqlmodel import Session

from control_plane.db.models import AllocationRow
from control_plane.schemas.allocations import Allocation
from control_plane.schemas.enums import AllocationStatus, TaskStatus
from control_plane.schemas.nodes import TaskReport, WarmupReport
from control_plane.services import lifecycle, sql
from control_plane.services.errors import NotFound
from control_plane.services.granting import schedule_pending
from control_plane.services.views import allocation_view

FINAL = (TaskStatus.EXITED, TaskStatus.FAILED, TaskStatus.STOPPED)


def _on_node(session: Session, node_id: str, allocation_id: str) -> AllocationRow:
    alloc = session.get(AllocationRow, allocation_id)
    # The GPUs it has now, or, once it has none, its last set: as its view shows them.
    nodes = session.connection().execute(sql.ALLOCATION_NODES, {"owner": allocation_id}).all()
    if alloc is None or not _shown_on(nodes, node_id):
        raise NotFound(f"allocation {allocation_id} not found on node {node_id}")
    return alloc


def _shown_on(rows: Sequence[Row[tuple[str, float | None, float]]], node_id: str) -> bool:
    """Whether the allocation's GPUs (active ones, else those of its last assignment) include
    one on this node; the same rule as the allocation's view, in one small query."""
    active = [node for node, ended, _ in rows if ended is None]
    if active:
        return node_id in active
    if not rows:
        return False
    last = max(started for _, _, started in rows)
    return any(node == node_id for node, _, started in rows if started == last)


def report_warmup(
    session: Session, *, node_id: str, allocation_id: str, body: WarmupReport, now: float
) -> Allocation:
    """The cold start of a reactive allocation ended: its GPUs are usable from now."""
    alloc = _on_node(session, node_id, allocation_id)
    if not body.started and alloc.ready_at is None:
        alloc.ready_at = now
        if not body.ok:
            tail = (body.output_tail or "")[-400:]
            alloc.reason = f"warm-up failed (exit {body.exit_code}); GPUs usable cold: {tail}"
    session.flush()
    return allocation_view(session, alloc)


def report(
    session: Session, *, node_id: str, allocation_id: str, body: TaskReport, now: float
) -> Allocation:
    alloc = _on_node(session, node_id, allocation_id)
    alloc.task_status = body.status.value
    if body.exit_code is not None:
        alloc.exit_code = body.exit_code
    if body.output_tail is not None:
        alloc.output_tail = body.output_tail
    if body.status in FINAL and alloc.status == AllocationStatus.ALLOCATED.value:
        lifecycle.end_allocation(
            session,
            alloc,
            AllocationStatus.RELEASED,
            now=now,
            reason=f"task {body.status.value} (exit {body.exit_code})",
        )
        session.flush()
        schedule_pending(session, now=now)
    session.flush()
    return allocation_view(session, alloc)
