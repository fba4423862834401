"""Real allocations: create (place, queue or refuse), claim a hold, release, and the queue."""

from __future__ import annotations

import json

from sqlalchemy import func
from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, AssignmentRow, HoldRow, TenantRow
from control_plane.scheduling.fairshare import (
    DecayedUsage,
    PendingView,
    fair_share_factors,
    order_pending,
)
from control_plane.scheduling.quotas import QuotaVerdict, TenantQuota, TenantUsage, check_quota
from control_plane.schemas.allocations import Allocation, AllocationCreate, HoldClaim
from control_plane.schemas.enums import (
    ACTIVE_ALLOCATION_STATUSES,
    AllocationStatus,
    HoldStatus,
    JobClass,
)
from control_plane.services import lifecycle, placing, sql
from control_plane.services.auth import ensure_tenant
from control_plane.services.errors import Conflict, NotFound, QuotaExceeded
from control_plane.services.events import move, record
from control_plane.services.ids import new_id
from control_plane.services.views import allocation_view

ACTIVE_ALLOCATIONS = [s.value for s in ACTIVE_ALLOCATION_STATUSES]
CLAIMABLE = (HoldStatus.PLACED.value, HoldStatus.WARMING.value, HoldStatus.READY.value)


def tenant_allocation_or_404(
    session: Session, *, tenant_id: str | None, allocation_id: str
) -> AllocationRow:
    row = session.get(AllocationRow, allocation_id)
    # Another tenant's allocation is "not found": existence is not revealed.
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound(f"allocation {allocation_id} not found")
    return row


def _usage(session: Session, tenant_id: str) -> TenantUsage:
    """GPUs the tenant holds or waits for now (pending requests count: no queue-jumping)."""
    rows = session.connection().execute(sql.ACTIVE_BY_CLASS, {"tenant": tenant_id}).all()
    by_class = {job_class: int(total or 0) for job_class, total in rows}
    return TenantUsage(
        online_gpus=by_class.get(JobClass.ONLINE.value, 0),
        batch_gpus=by_class.get(JobClass.BATCH.value, 0),
    )


def _quota(tenant: TenantRow) -> TenantQuota:
    return TenantQuota(
        quota_gpus=tenant.quota_gpus,
        burst_gpus=tenant.burst_gpus,
        online_share=tenant.online_share,
    )


def _admit(
    session: Session, tenant: TenantRow, body: AllocationCreate | AllocationRow
) -> str | None:
    """Refuse at once (429) what would take the tenant over its quota plus burst.

    Returns None when admitted, or the reason to queue: a class asking within its own
    guarantee waits for the GPUs the other class borrowed from it.
    """
    decision = check_quota(
        _quota(tenant), _usage(session, tenant.id), body.gpu_count, JobClass(body.job_class)
    )
    if decision.verdict == QuotaVerdict.QUEUE:
        return decision.reason
    if not decision.admitted:
        raise QuotaExceeded(decision.reason, field="gpu_count")
    return None


def answer(alloc: Allocation) -> tuple[int, Allocation]:
    """201 when the allocation has its GPUs, 202 while it waits in the queue."""
    return (202 if alloc.status == AllocationStatus.PENDING else 201), alloc


def create(
    session: Session, *, tenant_id: str, body: AllocationCreate, now: float
) -> tuple[int, Allocation]:
    """Place now (201), queue (202) or refuse (429). Runs inside the caller's transaction."""
    tenant = ensure_tenant(session, tenant_id)
    if body.hold_id is not None:
        claim = HoldClaim(lease_s=body.lease_s, command=body.command, label=body.label)
        return answer(
            claim_hold(session, tenant_id=tenant_id, hold_id=body.hold_id, body=claim, now=now)
        )
    if body.use_holds:
        match = _matching_hold(session, tenant_id=tenant_id, body=body, now=now)
        if match is not None:
            claim = HoldClaim(lease_s=body.lease_s, command=body.command, label=body.label)
            return answer(_claim(session, tenant, match, claim, now=now))
    wait = _admit(session, tenant, body)
    alloc = AllocationRow(
        id=new_id("alloc"),
        tenant_id=tenant_id,
        status=AllocationStatus.PENDING.value,
        gpu_count=body.gpu_count,
        gpu_model=body.gpu_model,
        requested_at=now,
        lease_s=body.lease_s,
        strategy=body.strategy.value,
        job_class=body.job_class.value,
        label=body.label,
        warmup=body.warmup,
        command_json=json.dumps(body.command) if body.command else None,
    )
    cluster = placing.load_cluster(session)
    choice = None if wait is not None else _choose(session, cluster, alloc)
    if choice is None:
        session.add(alloc)
        record(
            session,
            kind="allocation",
            object_id=alloc.id,
            tenant_id=tenant_id,
            to_state=alloc.status,
            at=now,
            reason=f"queued: {wait}" if wait is not None else "queued: no GPUs free",
        )
        return 202, allocation_view(session, alloc, gpus=[])
    gpus = _apply(session, alloc, choice, now=now, queued=False)
    return 201, allocation_view(session, alloc, gpus=cluster.describe(gpus))


Choice = tuple[list[tuple[str, str]], list[HoldRow]]


def _choose(session: Session, cluster: placing.Cluster, alloc: AllocationRow) -> Choice | None:
    """Free GPUs for the allocation, else GPUs freed by displacing holds; None if neither."""
    request = placing.request_of(alloc.gpu_count, alloc.gpu_model, alloc.strategy)
    gpus = placing.find_gpus(cluster, request)
    if gpus is not None:
        return gpus, []
    return placing.find_gpus_preempting(session, cluster, request)


def _apply(
    session: Session, alloc: AllocationRow, choice: Choice, *, now: float, queued: bool
) -> list[str]:
    """Give the allocation its GPUs (ending the holds displaced for it); their uuids."""
    gpus, preempted = choice
    for hold in preempted:
        lifecycle.end_hold(
            session,
            hold,
            HoldStatus.PREEMPTED,
            now=now,
            reason=f"preempted by allocation {alloc.id}",
        )
    lifecycle.assign(session, gpus=gpus, now=now, allocation_id=alloc.id)
    # Fields first, then the state change: its event insert flushes them in one UPDATE.
    alloc.allocated_at = now
    # Usable once assigned, unless a warm-up must run first: then when the node says so.
    alloc.ready_at = None if alloc.warmup else now
    alloc.expires_at = None if alloc.lease_s is None else now + alloc.lease_s
    if preempted:
        alloc.preempted_json = json.dumps([h.id for h in preempted])
    reason = "placed" + (f", preempted {len(preempted)} hold(s)" if preempted else "")
    if queued:
        move(session, alloc, "allocation", AllocationStatus.ALLOCATED.value, now=now, reason=reason)
    else:
        # Placed in the request that created it: it never waited, so it never was pending.
        # Added only now, so that the row is inserted once, in its final state.
        alloc.status = AllocationStatus.ALLOCATED.value
        session.add(alloc)
        record(
            session,
            kind="allocation",
            object_id=alloc.id,
            tenant_id=alloc.tenant_id,
            to_state=alloc.status,
            at=now,
            reason=reason + " at once",
        )
    return [uuid for uuid, _ in gpus]


def _try_place(
    session: Session, cluster: placing.Cluster, alloc: AllocationRow, *, now: float
) -> bool:
    choice = _choose(session, cluster, alloc)
    if choice is None:
        return False
    _apply(session, alloc, choice, now=now, queued=True)
    return True


def _matching_hold(
    session: Session, *, tenant_id: str, body: AllocationCreate, now: float
) -> HoldRow | None:
    """The tenant's best claimable hold of exactly this shape: ready first, then warming."""
    query = select(HoldRow).where(
        HoldRow.tenant_id == tenant_id,
        col(HoldRow.status).in_(CLAIMABLE),
        HoldRow.gpu_count == body.gpu_count,
        HoldRow.expires_at > now,
    )
    if body.gpu_model is not None:
        query = query.where(HoldRow.gpu_model == body.gpu_model)
    rank = {HoldStatus.READY.value: 0, HoldStatus.WARMING.value: 1, HoldStatus.PLACED.value: 2}
    holds = sorted(session.exec(query).all(), key=lambda h: (rank[h.status], h.created_at))
    return holds[0] if holds else None


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
    return _claim(session, tenant, hold, body, now=now)


def _claim(
    session: Session, tenant: TenantRow, hold: HoldRow, body: HoldClaim, *, now: float
) -> Allocation:
    alloc = AllocationRow(
        id=new_id("alloc"),
        tenant_id=tenant.id,
        status=AllocationStatus.PENDING.value,
        gpu_count=hold.gpu_count,
        gpu_model=hold.gpu_model,
        hold_id=hold.id,
        requested_at=now,
        lease_s=body.lease_s,
        strategy=hold.strategy,
        job_class="batch",
        label=body.label,
        command_json=json.dumps(body.command) if body.command else None,
    )
    wait = _admit(session, tenant, alloc)
    if wait is not None:
        # The hold stays as it is, warm, for a claim once the borrowed GPUs are back.
        raise QuotaExceeded(f"{wait}; the hold is kept: claim it again then", field="gpu_count")
    session.add(alloc)
    record(
        session,
        kind="allocation",
        object_id=alloc.id,
        tenant_id=tenant.id,
        to_state=alloc.status,
        at=now,
        reason=f"claim of hold {hold.id}",
    )
    was = hold.status
    hold.allocation_id = alloc.id
    if was == HoldStatus.REQUESTED.value:
        # Never placed: the claim is an ordinary reactive request from here on.
        lifecycle.end_hold(
            session, hold, HoldStatus.CLAIMED, now=now, reason="claimed before it was placed"
        )
        session.flush()
        _try_place(session, placing.load_cluster(session), alloc, now=now)
    else:
        lifecycle.end_hold(session, hold, HoldStatus.CLAIMED, now=now, reason="claimed")
        session.execute(
            AssignmentRow.__table__.update()
            .where(AssignmentRow.hold_id == hold.id, col(AssignmentRow.ended_at).is_(None))
            .values(allocation_id=alloc.id)
        )
        alloc.allocated_at = now
        alloc.warm = was == HoldStatus.READY.value
        # A warming hold's GPUs become usable when its warm-up ends (the node reports it).
        alloc.ready_at = now if alloc.warm else None
        alloc.expires_at = None if alloc.lease_s is None else now + alloc.lease_s
        move(
            session,
            alloc,
            "allocation",
            AllocationStatus.ALLOCATED.value,
            now=now,
            reason=f"claimed hold ({was})",
        )
    session.flush()
    return allocation_view(session, alloc)


def release(
    session: Session, *, tenant_id: str | None, allocation_id: str, now: float
) -> Allocation:
    """Release (idempotent: releasing twice answers the same and frees nothing twice)."""
    alloc = tenant_allocation_or_404(session, tenant_id=tenant_id, allocation_id=allocation_id)
    if alloc.status == AllocationStatus.ALLOCATED.value:
        freed = lifecycle.end_allocation(
            session, alloc, AllocationStatus.RELEASED, now=now, reason="released by client"
        )
        schedule_pending(session, now=now)
        return allocation_view(session, alloc, gpus=placing.load_cluster(session).describe(freed))
    if alloc.status == AllocationStatus.PENDING.value:
        lifecycle.end_allocation(
            session, alloc, AllocationStatus.CANCELLED, now=now, reason="cancelled while pending"
        )
        return allocation_view(session, alloc, gpus=[])
    return allocation_view(session, alloc)


def schedule_pending(session: Session, *, now: float, limit: int = 200) -> int:
    """Place queued allocations in fair-share order while they fit; returns how many."""
    pending = session.exec(
        select(AllocationRow)
        .where(AllocationRow.status == AllocationStatus.PENDING.value)
        .order_by(col(AllocationRow.requested_at))
        .limit(limit)
    ).all()
    if not pending:
        return 0
    tenants = session.exec(select(TenantRow)).all()
    factors = fair_share_factors(
        {t.id: DecayedUsage(t.usage_gpu_s, t.usage_at).at_time(now) for t in tenants},
        {t.id: t.weight for t in tenants},
    )
    by_id = {a.id: a for a in pending}
    views = [PendingView(a.id, a.tenant_id, a.gpu_count, a.requested_at) for a in pending]
    cluster = placing.load_cluster(session)
    limits = {t.id: _quota(t).limit for t in tenants}
    allocated: dict[str, int] = {}
    placed = 0
    for view in order_pending(views, factors, now):
        alloc = by_id[view.id]
        if alloc.tenant_id not in allocated:
            allocated[alloc.tenant_id] = _allocated_gpus(session, alloc.tenant_id)
        # A request queued for GPUs lent to its tenant's other class waits for their return:
        # the tenant never runs more than quota + burst at once.
        if allocated[alloc.tenant_id] + alloc.gpu_count > limits[alloc.tenant_id]:
            continue
        if _try_place(session, cluster, alloc, now=now):
            allocated[alloc.tenant_id] += alloc.gpu_count
            placed += 1
    return placed


def _allocated_gpus(session: Session, tenant_id: str) -> int:
    total = session.exec(
        select(func.coalesce(func.sum(AllocationRow.gpu_count), 0)).where(
            AllocationRow.tenant_id == tenant_id,
            AllocationRow.status == AllocationStatus.ALLOCATED.value,
        )
    ).one()
    return int(total)
