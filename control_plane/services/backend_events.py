"""What a scheduler backend (Slurm) reports about a hold: a job claimed it, or it is gone."""

from __future__ import annotations

from sqlmodel import Session

from control_plane.db.models import AllocationRow, HoldRow
from control_plane.schemas.allocations import HoldClaim
from control_plane.schemas.backends import BackendEvent, BackendEventKind, BackendEventReply
from control_plane.schemas.enums import HoldStatus
from control_plane.services import claims, lifecycle, placing
from control_plane.services.auth import ensure_tenant
from control_plane.services.errors import Conflict, Invalid, NotFound
from control_plane.services.views import allocation_view, hold_view


def report(
    session: Session, *, node_id: str, hold_id: str, body: BackendEvent, now: float
) -> BackendEventReply:
    """Apply one event; reporting the same event again answers as the first time did."""
    hold = session.get(HoldRow, hold_id)
    if hold is None or not placing.hold_on_node(session, hold_id, node_id):
        raise NotFound(f"hold {hold_id} not found on node {node_id}")
    if body.kind == BackendEventKind.CLAIMED:
        return _claimed(session, hold, body, now)
    if hold.status in claims.CLAIMABLE or hold.status == HoldStatus.REQUESTED.value:
        status = HoldStatus.CANCELLED if body.kind == BackendEventKind.ENDED else HoldStatus.FAILED
        what = "removed outside jitgpu" if body.kind == BackendEventKind.ENDED else "failed"
        detail = f": {body.reason}" if body.reason else ""
        lifecycle.end_hold(session, hold, status, now=now, reason=f"backend: {what}{detail}")
        session.flush()
    return BackendEventReply(hold=hold_view(session, hold))


def _claimed(session: Session, hold: HoldRow, body: BackendEvent, now: float) -> BackendEventReply:
    label = f"job {body.job_id}" if body.job_id else "backend job"
    if hold.status == HoldStatus.CLAIMED.value and hold.allocation_id:
        alloc = session.get(AllocationRow, hold.allocation_id)
        if alloc is not None and alloc.label == label:
            return BackendEventReply(
                hold=hold_view(session, hold), allocation=allocation_view(session, alloc)
            )
        raise Conflict(
            f"hold {hold.id} was already claimed by {hold.allocation_id}", code="hold_claimed"
        )
    if hold.status not in claims.CLAIMABLE:
        raise Conflict(
            f"hold {hold.id} is {hold.status} and can no longer be claimed",
            code="hold_not_claimable",
        )
    submitted = body.submitted_at.timestamp() if body.submitted_at else None
    started = body.started_at.timestamp() if body.started_at else None
    if submitted is not None and started is not None and started < submitted:
        raise Invalid("started_at is before submitted_at", field="started_at")
    tenant = ensure_tenant(session, hold.tenant_id)
    view = claims.claim(session, tenant, hold, HoldClaim(label=label), now=now)
    alloc = session.get(AllocationRow, view.id)
    assert alloc is not None
    # Time-to-GPU by the backend's own clock: the job waited from submit to start, whatever
    # delay the bridge's polling added before it reported the claim.
    if submitted is not None:
        alloc.requested_at = min(submitted, now)
    if started is not None:
        alloc.ready_at = max(min(started, now), alloc.requested_at)
        alloc.allocated_at = alloc.ready_at
    session.flush()
    return BackendEventReply(
        hold=hold_view(session, hold), allocation=allocation_view(session, alloc)
    )
