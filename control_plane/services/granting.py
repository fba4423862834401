"""Turning a request into an allocation's GPUs: quota admission, placement, and the queue."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlmodel import Session

from control_plane.db.models import AllocationRow, HoldRow, TenantRow
from control_plane.scheduling.fairshare import (
    DecayedUsage,
    PendingView,
    fair_share_factors,
    order_pending,
)
from control_plane.scheduling.quotas import QuotaVerdict, TenantQuota, TenantUsage, check_quota
from control_plane.scheduling.transitions import check_transition
from control_plane.schemas.allocations import AllocationCreate
from control_plane.schemas.enums import AllocationStatus, HoldStatus, JobClass
from control_plane.services import lifecycle, placing, sql
from control_plane.services.errors import QuotaExceeded
from control_plane.services.events import move, record

PENDING = AllocationStatus.PENDING.value
ALLOCATED = AllocationStatus.ALLOCATED.value


def running(session: Session, tenant_id: str) -> TenantUsage:
    """GPUs the tenant has allocated now: the quota limits what runs, not what waits."""
    rows = sql.run(session, sql.ALLOCATED_BY_CLASS, {"tenant": tenant_id}).fetchall()
    by_class = {job_class: int(total or 0) for job_class, total in rows}
    return TenantUsage(
        online_gpus=by_class.get(JobClass.ONLINE.value, 0),
        batch_gpus=by_class.get(JobClass.BATCH.value, 0),
    )


def quota_of(tenant: TenantRow) -> TenantQuota:
    return TenantQuota(
        quota_gpus=tenant.quota_gpus,
        burst_gpus=tenant.burst_gpus,
        online_share=tenant.online_share,
    )


def admit(
    session: Session,
    tenant: TenantRow,
    body: AllocationCreate | AllocationRow,
    *,
    queue_over_quota: bool = False,
    usage: TenantUsage | None = None,
) -> str | None:
    """Refuse at once (429) what would take the tenant over its quota plus burst, or, with
    `queue_over_quota`, queue it until the tenant's running GPUs leave room.

    Returns None when admitted, or the reason to queue: a class asking within its own
    guarantee also waits for the GPUs the other class borrowed from it. A request larger than
    quota + burst could never run, and is refused either way.
    """
    decision = check_quota(
        quota_of(tenant),
        usage if usage is not None else running(session, tenant.id),
        body.gpu_count,
        JobClass(body.job_class),
        queue_over_quota=queue_over_quota,
    )
    if decision.verdict == QuotaVerdict.QUEUE:
        return decision.reason
    if not decision.admitted:
        raise QuotaExceeded(decision.reason, field="gpu_count")
    return None


Choice = tuple[list[tuple[str, str]], list[HoldRow]]


def choose(session: Session, cluster: placing.Cluster, alloc: AllocationRow) -> Choice | None:
    """Free GPUs for the allocation, else GPUs freed by displacing holds; None if neither."""
    request = placing.request_of(alloc.gpu_count, alloc.gpu_model, alloc.strategy)
    gpus = placing.find_gpus(cluster, request)
    if gpus is not None:
        return gpus, []
    return placing.find_gpus_preempting(session, cluster, request)


def apply(
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
    if alloc.reason and alloc.reason.startswith("queued:"):
        alloc.reason = None  # it waits no longer; the events keep why it did
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
        record_new(session, alloc, now=now, reason=reason + " at once")
    return [uuid for uuid, _ in gpus]


def record_new(session: Session, alloc: AllocationRow, *, now: float, reason: str) -> None:
    """The event of an allocation's first state (it has no state before)."""
    record(
        session,
        kind="allocation",
        object_id=alloc.id,
        tenant_id=alloc.tenant_id,
        to_state=alloc.status,
        at=now,
        reason=reason,
    )


def try_place(
    session: Session, cluster: placing.Cluster, alloc: AllocationRow, *, now: float
) -> bool:
    choice = choose(session, cluster, alloc)
    if choice is None:
        return False
    apply(session, alloc, choice, now=now, queued=True)
    return True


def schedule_pending(
    session: Session,
    *,
    now: float,
    per_tenant: int = 64,
    shares: Sequence[Any] | None = None,
    charged: tuple[str, float] | None = None,
) -> int:
    """Place queued allocations in fair-share order while they fit; returns how many.

    Only tenants below their limit are served, and of each only its oldest `per_tenant`
    requests are read: within a tenant the queue is first come, first served (same factor,
    aging favours the older), so the head is all the order can pick. Reading heads per
    tenant, not the oldest requests overall, keeps a tenant with thousands queued from hiding
    a light tenant's request behind them. Every release and task exit runs this, so it reads
    and writes with prebuilt statements; only a request that must displace holds takes the
    ORM path.

    `shares`: the `QUEUE_TENANTS` rows, when the caller read them already (a release reads
    them in its own round trip), before `charged`: (tenant, GPU-seconds) charged since.
    """
    session.flush()  # the reads below must see this transaction's ORM changes
    if shares is None:
        shares = sql.run(session, sql.QUEUE_TENANTS).fetchall()
    waiting = {tenant for tenant, *_, queued, _ in shares if queued}
    if not waiting:
        return 0
    limits = {
        tenant: TenantQuota(quota_gpus=quota, burst_gpus=burst, online_share=online).limit
        for tenant, quota, burst, online, *_ in shares
    }
    allocated = {tenant: int(running) for tenant, *_, running in shares}
    # A tenant at its limit can run nothing more now, however long its queue.
    served = sorted(t for t in waiting if allocated.get(t, 0) < limits.get(t, 0))
    if not served:
        return 0
    pending: list[SimpleNamespace] = []
    for tenant_id in served:
        # Each request needs a GPU at least, so no more than `room` of them can run now; the
        # slack lets smaller requests behind a big one at the head fill the room.
        room = limits[tenant_id] - allocated.get(tenant_id, 0)
        cursor = sql.run(
            session, sql.QUEUE_HEAD, {"tenant": tenant_id, "n": min(per_tenant, room + 16)}
        )
        names = [d[0] for d in cursor.description]
        pending.extend(SimpleNamespace(**dict(zip(names, r, strict=True))) for r in cursor)
    usage = {t: DecayedUsage(used, at) for t, *_, used, at, _, _ in shares}
    if charged is not None and charged[0] in usage and charged[1] > 0:
        usage[charged[0]] = usage[charged[0]].charge(charged[1], now)
    factors = fair_share_factors(
        {t: u.at_time(now) for t, u in usage.items()},
        {t: weight for t, _, _, _, weight, *_ in shares},
    )
    by_id = {a.id: a for a in pending}
    views = [PendingView(a.id, a.tenant_id, a.gpu_count, a.requested_at) for a in pending]
    cluster = placing.load_cluster(session)
    placed = 0
    # A shape that did not fit will not fit later in this pass: a placement only takes GPUs,
    # free ones or displaced holds', so what the next request may use is a subset of what
    # this one could. Each shape is tried once: on a full cluster a tenant's 64 queued
    # one-GPU requests cost one try, not 64 (each a read of the placed holds, about 13 ms a
    # request in all, every create and release, on the one writer).
    unfit: set[tuple[int, str | None, str]] = set()
    for view in order_pending(views, factors, now):
        alloc = by_id[view.id]
        # The tenant never runs more than quota + burst at once: a request that would take it
        # over waits for its running GPUs to come back.
        if allocated.get(alloc.tenant_id, 0) + alloc.gpu_count > limits[alloc.tenant_id]:
            continue
        shape = (alloc.gpu_count, alloc.gpu_model, alloc.strategy)
        if shape in unfit:
            continue
        if _place_queued(session, cluster, alloc, now=now):
            allocated[alloc.tenant_id] = allocated.get(alloc.tenant_id, 0) + alloc.gpu_count
            placed += 1
        else:
            unfit.add(shape)
    return placed


def _place_queued(
    session: Session, cluster: placing.Cluster, alloc: SimpleNamespace, *, now: float
) -> bool:
    """Give a queued request GPUs if it fits now: free ones in Core statements, else, by
    displacing holds, on the ORM path."""
    request = placing.request_of(alloc.gpu_count, alloc.gpu_model, alloc.strategy)
    gpus = placing.find_gpus(cluster, request)
    if gpus is None:
        choice = placing.find_gpus_preempting(session, cluster, request)
        if choice is None:
            return False
        row = session.get(AllocationRow, alloc.id)
        assert row is not None  # read in this transaction
        apply(session, row, choice, now=now, queued=True)
        return True
    check_transition("allocation", PENDING, ALLOCATED)
    lifecycle.forget_loaded(session, alloc.id)
    reason = alloc.reason
    if reason and reason.startswith("queued:"):
        reason = None  # it waits no longer; the events keep why it did
    sql.send(
        session,
        sql.PLACE_QUEUED,
        {
            "alloc": alloc.id,
            "at": now,
            # Usable once assigned, unless a warm-up must run first: then when the node says.
            "ready": None if alloc.warmup else now,
            "expires": None if alloc.lease_s is None else now + alloc.lease_s,
            "why": reason,
        },
    )
    lifecycle.assign(session, gpus=gpus, now=now, allocation_id=alloc.id)
    record(
        session,
        kind="allocation",
        object_id=alloc.id,
        tenant_id=alloc.tenant_id,
        from_state=PENDING,
        to_state=ALLOCATED,
        at=now,
        reason="placed",
    )
    return True
