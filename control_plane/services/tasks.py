"""Tasks: an allocation's command run by the node agent; its exit releases the GPUs."""

from __future__ import annotations

from sqlmodel import Session

from control_plane.db.models import AllocationRow
from control_plane.schemas.allocations import Allocation
from control_plane.schemas.nodes import TaskReport, WarmupReport
from control_plane.services import hotpath, sql
from control_plane.services.errors import NotFound
from control_plane.services.views import allocation_view


def _on_node(session: Session, node_id: str, allocation_id: str) -> AllocationRow:
    alloc = session.get(AllocationRow, allocation_id)
    # The GPUs it has now, or, once it has none, its last set: as its view shows them.
    rows = sql.run(session, sql.ALLOCATION_GPUS, {"owner": allocation_id}).fetchall()
    if alloc is None or all(node != node_id for _, node in hotpath.shown_gpus(rows)):
        raise NotFound(f"allocation {allocation_id} not found on node {node_id}")
    return alloc


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
    """The task's status; its end releases the allocation (`hotpath.report_task`)."""
    return hotpath.report_task(
        session, node_id=node_id, allocation_id=allocation_id, body=body, now=now
    )
