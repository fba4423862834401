"""Claiming a hold: a job takes the hold's warm GPUs, all of them or only as many as it needs."""

from __future__ import annotations

import json
from collections import Counter

from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, AssignmentRow, GpuRow, HoldRow, TenantRow
from control_plane.db.session import touch_nodes
from control_plane.schemas.allocations import Allocation, AllocationCreate, HoldClaim
from control_plane.schemas.enums import AllocationStatus, HoldStatus
from control_plane.services import granting, lifecycle, placing, sql
from control_plane.services.auth import ensure_tenant
from control_plane.services.errors import Conflict, Invalid, NotFound, QuotaExceeded
from control_plane.services.events import move
from control_plane.services.ids import new_id
from control_plane.services.views import allocation_view

CLAIMABLE = tuple(s.value for s in sql.CLAIMABLE_HOLD_STATUSES)


def matching_hold(
    session: Session, *, tenant_id: str, body: AllocationCreate, now: float
) -> HoldRow | None:
    """The tenant's best claimable hold of exactly this shape: ready first, then warming.

    A job that asks for a warm-up profile is served only by GPUs warmed with that one."""
    found = sql.run(
        session,
        sql.CLAIMABLE_HOLDS,
        {
            "tenant": tenant_id,
            "count": body.gpu_count,
            "now": now,
            "model": body.gpu_model,
            "warmup": body.warmup,
        },
    ).fetchall()
    if not found:
        return None
    rank = {HoldStatus.READY.value: 0, HoldStatus.WARMING.value: 1, HoldStatus.PLACED.value: 2}
    best = min(found, key=lambda h: (rank[h[1]], h[2]))
    return session.get(HoldRow, best[0])


def claim_hold(
    session: Session, *, tenant_id: str, hold_id: str, body: HoldClaim, now: float
) -> Allocation:
    tenant = ensure_tenant(session, tenant_id)
    hold = session.get(HoldRow, hold_id)
    if hold is None or hold.tenant_id != tenant_id:
        raise NotFound(f"hold {hold_id} not found")
    if hold.status == HoldStatus.CLAIMED.value and hold.allocation_id:
        raise Conflict(
            f"hold {hold_id} was already claimed by {hold.allocation_id}", code="hold_claimed"
        )
    if hold.status not in (*CLAIMABLE, HoldStatus.REQUESTED.value) or hold.expires_at <= now:
        raise Conflict(
            f"hold {hold_id} is {hold.status} and can no longer be claimed",
            code="hold_not_claimable",
        )
    if body.gpu_count is not None and body.gpu_count > hold.gpu_count:
        raise Invalid(
            f"gpu_count: hold {hold_id} has {hold.gpu_count} GPU(s); "
            f"a claim takes at most that many, not {body.gpu_count}",
            field="gpu_count",
        )
    return claim(session, tenant, hold, body, now=now)


def claim(
    session: Session, tenant: TenantRow, hold: HoldRow, body: HoldClaim, *, now: float
) -> Allocation:
    """Turn the hold into an allocation of `body.gpu_count` of its GPUs (default: all).

    A smaller claim keeps that many of the hold's GPUs and gives the rest back at once, so
    that a job never sits on GPUs it does not use; the hold ends as claimed either way.
    """
    count = body.gpu_count or hold.gpu_count
    alloc = AllocationRow(
        id=new_id("alloc"),
        tenant_id=tenant.id,
        status=AllocationStatus.PENDING.value,
        gpu_count=count,
        gpu_model=hold.gpu_model,
        hold_id=hold.id,
        requested_at=now,
        lease_s=body.lease_s,
        strategy=(body.strategy.value if body.strategy is not None else hold.strategy),
        job_class=body.job_class.value,
        label=body.label,
        # A hold never placed becomes a reactive request that warms as the hold or the claim
        # asks. A warming or ready hold's warm-up is the hold's own (a second one would run
        # on GPUs already warming): the allocation names none.
        warmup=(hold.warmup or body.warmup) if hold.status == HoldStatus.REQUESTED.value else None,
        command_json=json.dumps(body.command) if body.command else None,
    )
    # The quota counts what the allocation keeps, not what the hold had.
    wait = granting.admit(session, tenant, alloc)
    if wait is not None:
        # The hold stays as it is, warm, for a claim once the borrowed GPUs are back.
        raise QuotaExceeded(f"{wait}; the hold is kept: claim it again then", field="gpu_count")
    session.add(alloc)
    granting.record_new(session, alloc, now=now, reason=f"claim of hold {hold.id}")
    was = hold.status
    hold.allocation_id = alloc.id
    part = f"{count} of {hold.gpu_count} GPUs" if count < hold.gpu_count else None
    if was == HoldStatus.REQUESTED.value:
        # Never placed: the claim is an ordinary reactive request from here on.
        reason = (
            f"claimed ({part}) before it was placed" if part else "claimed before it was placed"
        )
        lifecycle.end_hold(session, hold, HoldStatus.CLAIMED, now=now, reason=reason)
        session.flush()
        granting.try_place(session, placing.load_cluster(session), alloc, now=now)
        session.flush()
        return allocation_view(session, alloc)
    released = _surplus(session, hold.id, keep=count) if part else []
    reason = f"claimed {part}; {len(released)} released" if part else "claimed"
    lifecycle.end_hold(session, hold, HoldStatus.CLAIMED, now=now, reason=reason)
    if released:
        lifecycle.end_hold_gpus(session, hold_id=hold.id, gpu_uuids=released, now=now)
    moved = session.execute(
        AssignmentRow.__table__.update()
        .where(AssignmentRow.hold_id == hold.id, col(AssignmentRow.ended_at).is_(None))
        .values(allocation_id=alloc.id)
        .returning(AssignmentRow.__table__.c.node_id)
    )
    # The nodes learn at once that the hold's GPUs now serve the allocation (and its command);
    # the epoch moves, so that a node can tell the older desired state (the hold) from this.
    touch_nodes(session, moved.scalars().all())
    placing.mark_changed(session)
    alloc.allocated_at = now
    alloc.warm = was == HoldStatus.READY.value
    if was == HoldStatus.PLACED.value:
        # Its warm-up had not begun: the node warms the GPUs for the job now, as it would for
        # a reactive allocation with that profile (none: they are usable as they are).
        alloc.warmup = hold.warmup or body.warmup
        alloc.ready_at = None if alloc.warmup else now
    else:
        # A warming hold's GPUs become usable when its warm-up ends (the node reports it).
        alloc.ready_at = now if alloc.warm else None
    alloc.expires_at = None if alloc.lease_s is None else now + alloc.lease_s
    move(
        session,
        alloc,
        "allocation",
        AllocationStatus.ALLOCATED.value,
        now=now,
        reason=f"claimed {part} of the hold ({was})" if part else f"claimed hold ({was})",
    )
    if released:
        # The GPUs given back may be what a queued request waits for.
        granting.schedule_pending(session, now=now)
    session.flush()
    return allocation_view(session, alloc)


def _surplus(session: Session, hold_id: str, *, keep: int) -> list[str]:
    """The hold's GPUs a claim of `keep` of them gives back.

    The kept ones stay together: first the node with most of the hold's GPUs, then by GPU
    index, so that a job spread over fewer nodes talks over fewer links. Deterministic: the
    same hold and count always keep the same GPUs.
    """
    rows = session.exec(
        select(AssignmentRow.gpu_uuid, AssignmentRow.node_id, GpuRow.index)
        .join(GpuRow, col(GpuRow.uuid) == col(AssignmentRow.gpu_uuid))
        .where(AssignmentRow.hold_id == hold_id, col(AssignmentRow.ended_at).is_(None))
    ).all()
    per_node = Counter(node for _, node, _ in rows)
    ordered = sorted(rows, key=lambda r: (-per_node[r[1]], r[1], r[2] or 0, r[0]))
    return [uuid for uuid, _, _ in ordered[keep:]]
