"""Real allocations: create (place, queue or refuse, or claim a hold), renew, release."""

from __future__ import annotations

from sqlmodel import Session

from control_plane.db.models import AllocationRow
from control_plane.schemas.allocations import (
    Allocation,
    AllocationCreate,
    AllocationRenew,
    HoldClaim,
)
from control_plane.schemas.enums import ACTIVE_ALLOCATION_STATUSES, AllocationStatus
from control_plane.services import (
    claims,
    events,
    feasible,
    granting,
    hotpath,
    lifecycle,
    placing,
)
from control_plane.services.auth import ensure_tenant
from control_plane.services.errors import Conflict, Invalid, NotFound, QueueFull
from control_plane.services.views import allocation_view

ACTIVE_ALLOCATIONS = [s.value for s in ACTIVE_ALLOCATION_STATUSES]


def tenant_allocation_or_404(
    session: Session, *, tenant_id: str | None, allocation_id: str
) -> AllocationRow:
    row = session.get(AllocationRow, allocation_id)
    # Another tenant's allocation is "not found": existence is not revealed.
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound(f"allocation {allocation_id} not found")
    return row


def answer(alloc: Allocation) -> tuple[int, Allocation]:
    """201 when the allocation has its GPUs, 202 while it waits in the queue."""
    return (202 if alloc.status == AllocationStatus.PENDING else 201), alloc


DEFAULT_MAX_QUEUED = 10_000


def create(
    session: Session,
    *,
    tenant_id: str,
    body: AllocationCreate,
    now: float,
    max_queued: int = DEFAULT_MAX_QUEUED,
) -> tuple[int, Allocation]:
    """Place now (201) or queue (202); refuse (429) only a request that could never run or one
    past the tenant's `max_queued` waiting requests. Runs inside the caller's transaction."""
    if body.hold_id is not None:
        # Naming a hold claims as many of its GPUs as asked for (422 if more than it has).
        claim = _claim_of(body, gpu_count=body.gpu_count)
        return answer(
            claims.claim_hold(
                session, tenant_id=tenant_id, hold_id=body.hold_id, body=claim, now=now
            )
        )
    # Admission reads the tenant's quota only (no ORM object on the common path), and
    # whether a hold may serve the request (404 for a tenant that does not exist).
    quota, waiting, running, claimable = hotpath.admission_of(session, tenant_id, body, now)
    if claimable:
        # Automatic matching takes only a hold of exactly this shape: a bigger one may be
        # meant for a bigger job of the tenant's.
        match = claims.matching_hold(session, tenant_id=tenant_id, body=body, now=now)
        if match is not None:
            tenant = ensure_tenant(session, tenant_id)
            return answer(claims.claim(session, tenant, match, _claim_of(body), now=now))
    if waiting >= max_queued:
        raise QueueFull(
            f"{waiting} requests of this tenant already wait in the queue, the most allowed; "
            "release or cancel some, or wait for them to run",
            field="gpu_count",
        )
    wait = granting.admit(session, quota, body, queue_over_quota=True, usage=running)  # type: ignore[arg-type]
    values = hotpath.new_allocation(tenant_id, body, now)
    if wait is not None:
        feasible.check(session, gpu_count=body.gpu_count, gpu_model=body.gpu_model)
        return _queue(session, AllocationRow(**vars(values)), now=now, reason=f"queued: {wait}")
    if waiting:
        feasible.check(session, gpu_count=body.gpu_count, gpu_model=body.gpu_model)
        # Behind the tenant's own waiting requests, never ahead of them: the queue's order
        # decides, and serves this one at once if it reaches it.
        alloc = AllocationRow(**vars(values))
        _queue(session, alloc, now=now, reason="queued behind the tenant's waiting requests")
        session.flush()
        granting.schedule_pending(session, now=now)
        return answer(allocation_view(session, alloc))
    cluster = placing.load_cluster(session)
    choice = granting.choose(session, cluster, values)  # type: ignore[arg-type]
    if choice is None:
        # Checked only here, off the path of a request placed at once: a request that can
        # never fit is refused rather than queued for ever.
        feasible.check(session, gpu_count=body.gpu_count, gpu_model=body.gpu_model)
        reason = feasible.waiting_reason(
            session, gpu_count=body.gpu_count, gpu_model=body.gpu_model
        )
        return _queue(session, AllocationRow(**vars(values)), now=now, reason=reason)
    gpus, preempted = choice
    if preempted:
        alloc = AllocationRow(**vars(values))
        uuids = granting.apply(session, alloc, choice, now=now, queued=False)
        return 201, allocation_view(session, alloc, gpus=cluster.describe(uuids))
    uuids = hotpath.insert_placed(session, values, gpus, now=now)
    hotpath.running_changed(session, values, gpus=values.gpu_count)
    return 201, allocation_view(session, values, gpus=cluster.describe(uuids))  # type: ignore[arg-type]


def _claim_of(body: AllocationCreate, *, gpu_count: int | None = None) -> HoldClaim:
    """The claim an allocation request makes: every field the request gave goes with it."""
    return HoldClaim(
        gpu_count=gpu_count,
        lease_s=body.lease_s,
        command=body.command,
        label=body.label,
        job_class=body.job_class,
        # Only a strategy the request chose overrides the hold's.
        strategy=body.strategy if "strategy" in body.model_fields_set else None,
        warmup=body.warmup,
    )


def _queue(
    session: Session, alloc: AllocationRow, *, now: float, reason: str
) -> tuple[int, Allocation]:
    alloc.reason = reason  # shown by `jitgpu alloc show` while it waits
    session.add(alloc)
    granting.record_new(session, alloc, now=now, reason=reason)
    return 202, allocation_view(session, alloc, gpus=[])


def release(
    session: Session, *, tenant_id: str | None, allocation_id: str, now: float
) -> Allocation:
    """Release (idempotent: releasing twice answers the same and frees nothing twice)."""
    # An allocated one (the common case) is released in Core statements.
    released = hotpath.release_allocated(
        session, tenant_id=tenant_id, allocation_id=allocation_id, now=now
    )
    if released is not None:
        return released
    alloc = tenant_allocation_or_404(session, tenant_id=tenant_id, allocation_id=allocation_id)
    if alloc.status == AllocationStatus.PENDING.value:
        lifecycle.end_allocation(
            session, alloc, AllocationStatus.CANCELLED, now=now, reason="cancelled while pending"
        )
        return allocation_view(session, alloc, gpus=[])
    return allocation_view(session, alloc)


def renew(
    session: Session, *, tenant_id: str, allocation_id: str, body: AllocationRenew, now: float
) -> Allocation:
    """Extend (or set) the lease of a live allocation: it now ends `lease_s` from now. A
    pending one keeps the new length for when it is granted; an ended one cannot be renewed."""
    alloc = tenant_allocation_or_404(session, tenant_id=tenant_id, allocation_id=allocation_id)
    lease_s = body.lease_s if body.lease_s is not None else alloc.lease_s
    if lease_s is None:
        raise Invalid(
            f"lease_s: allocation {allocation_id} has no lease; give lease_s to set one",
            field="lease_s",
        )
    if alloc.status not in ACTIVE_ALLOCATIONS:
        raise Conflict(
            f"allocation {allocation_id} is {alloc.status} and can no longer be renewed",
            code="allocation_ended",
        )
    alloc.lease_s = lease_s
    if alloc.status == AllocationStatus.ALLOCATED.value:
        alloc.expires_at = now + lease_s
    events.note(session, alloc, "allocation", now=now, reason=f"lease renewed: {lease_s} s")
    session.add(alloc)
    return allocation_view(session, alloc)
