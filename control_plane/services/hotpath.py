"""The hottest commands' common cases in prebuilt Core statements: an allocation placed at once,
the release of an allocated one and a node's task report build, load and flush no ORM object.

Every job sends one or two task reports, and the last releases its allocation. Everything else
(claims, preemption, cancelling a waiting request) stays on the ORM path in `allocations`;
both write the same rows and events.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlmodel import Session

from control_plane.db.session import BatchAdmissions, TxSession
from control_plane.scheduling.quotas import TenantUsage
from control_plane.scheduling.transitions import check_transition
from control_plane.schemas.allocations import Allocation, AllocationCreate
from control_plane.schemas.enums import AllocationStatus, JobClass, TaskStatus
from control_plane.schemas.nodes import TaskReport
from control_plane.services import events, granting, lifecycle, placing, sql
from control_plane.services.errors import NotFound
from control_plane.services.ids import new_id
from control_plane.services.views import allocation_view

ALLOCATED = AllocationStatus.ALLOCATED.value
RELEASED = AllocationStatus.RELEASED.value
FINAL_TASK = (TaskStatus.EXITED, TaskStatus.FAILED, TaskStatus.STOPPED)


# A tenant's columns a release changes (its usage charge): left out of a batch's reused read.
_CHARGED = ("usage_gpu_s", "usage_at")


def admission_of(
    session: Session, tenant_id: str, body: AllocationCreate, now: float
) -> tuple[SimpleNamespace, int, TenantUsage, bool]:
    """The tenant's row, how many of its requests wait, the GPUs it runs, and whether a hold
    of the request's shape may serve it (only when the request uses holds): one statement."""
    count = body.gpu_count if body.use_holds else None
    shape = (tenant_id, count, body.gpu_model, body.warmup)
    # An earlier command of the same writer batch may have read this tenant already.
    batch = _batch_reads(session)
    if batch is not None and tenant_id in batch.tenants and shape in batch.claimable:
        known, queued, online, batch_gpus = batch.tenants[tenant_id]
        usage = TenantUsage(online_gpus=online, batch_gpus=batch_gpus)
        return SimpleNamespace(**known), queued, usage, batch.claimable[shape]
    params = {
        "id": tenant_id,
        "count": count,
        "now": now,
        "model": body.gpu_model,
        "warmup": body.warmup,
    }
    row = sql.row(session, sql.TENANT_ADMISSION, params)
    if row is None:
        raise NotFound(f"tenant {tenant_id} not found")
    queued = int(row.pop("queued"))
    usage = TenantUsage(
        online_gpus=int(row.pop("online_gpus")), batch_gpus=int(row.pop("batch_gpus"))
    )
    claimable = bool(row.pop("claimable"))
    if batch is not None:
        # Not the usage charged so far, which a release in the batch changes: only what the
        # batch keeps exact is reused (a reader of it would fail, not read a stale value).
        kept = {k: v for k, v in row.items() if k not in _CHARGED}
        batch.tenants[tenant_id] = (kept, queued, usage.online_gpus, usage.batch_gpus)
        batch.claimable[shape] = claimable
    return SimpleNamespace(**row), queued, usage, claimable


def running_changed(session: Session, alloc: SimpleNamespace, *, gpus: int) -> None:
    """The command's whole effect on admission was that the allocation's tenant runs `gpus`
    more (or fewer) GPUs of its class: the batch's admission reads stay exact."""
    batch = _batch_reads(session)
    if batch is not None:
        online = alloc.job_class == JobClass.ONLINE.value
        batch.add_running(alloc.tenant_id, online=online, gpus=gpus)
        batch.kept = True


def _batch_reads(session: Session) -> BatchAdmissions | None:
    """The writer batch's admission reads; None outside a writer batch."""
    return session.admissions if isinstance(session, TxSession) else None


def new_allocation(tenant_id: str, body: AllocationCreate, now: float) -> SimpleNamespace:
    """A new request's row as plain values (every column): an ORM row is made of it only
    when it must wait or displace holds."""
    return SimpleNamespace(
        id=new_id("alloc"),
        tenant_id=tenant_id,
        status=AllocationStatus.PENDING.value,
        gpu_count=body.gpu_count,
        gpu_model=body.gpu_model,
        hold_id=None,
        warm=False,
        requested_at=now,
        allocated_at=None,
        ready_at=None,
        released_at=None,
        expires_at=None,
        lease_s=body.lease_s,
        strategy=body.strategy.value,
        job_class=body.job_class.value,
        label=body.label,
        warmup=body.warmup,
        command_json=json.dumps(body.command) if body.command else None,
        task_status=None,
        exit_code=None,
        output_tail=None,
        reason=None,
        preempted_json=None,
    )


def insert_placed(
    session: Session, alloc: SimpleNamespace, gpus: Sequence[tuple[str, str]], *, now: float
) -> list[str]:
    """Write an allocation placed in the request that made it, on free GPUs: its row in its
    final state, its assignments and its first event; the GPUs' uuids."""
    alloc.status = ALLOCATED
    alloc.allocated_at = now
    # Usable once assigned, unless a warm-up must run first: then when the node says so.
    alloc.ready_at = None if alloc.warmup else now
    alloc.expires_at = None if alloc.lease_s is None else now + alloc.lease_s
    # The row before its assignments, which name it.
    sql.send(session, sql.INSERT_ALLOCATION, vars(alloc))
    lifecycle.assign(session, gpus=gpus, now=now, allocation_id=alloc.id)
    granting.record_new(session, alloc, now=now, reason="placed at once")  # type: ignore[arg-type]
    return [uuid for uuid, _ in gpus]


def release_allocated(
    session: Session, *, tenant_id: str | None, allocation_id: str, now: float
) -> Allocation | None:
    """Release an allocated allocation; None when it is in another state (the caller's ORM
    path answers those). 404 for another tenant's or an unknown one.

    The release, the end of its GPUs' assignments and the queue's read need nothing read
    before them: on PostgreSQL they travel in one round trip."""
    session.flush()  # the Core statements below must see this transaction's ORM changes
    check_transition("allocation", ALLOCATED, RELEASED)
    lifecycle.forget_loaded(session, allocation_id)
    why = "released by client"
    release = {"alloc": allocation_id, "tenant": tenant_id, "to": RELEASED, "at": now, "why": why}
    (names, released), (_, ended), (_, shares) = sql.run_together(
        session,
        [
            (sql.RELEASE_ALLOCATED, release),
            (sql.END_RELEASED_ASSIGNMENTS, {"owner": allocation_id, "now": now}),
            (sql.QUEUE_TENANTS, None),
        ],
    )
    if not released:
        # Nothing changed: tell another tenant's or an unknown allocation from one in
        # another state.
        row = sql.row(session, sql.ALLOCATION_BY_ID, {"id": allocation_id})
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            raise NotFound(f"allocation {allocation_id} not found")
        return None
    alloc = SimpleNamespace(**dict(zip(names, released[0], strict=True)))
    return _released(session, alloc, now=now, ended=ended, shares=shares)


def report_task(
    session: Session, *, node_id: str, allocation_id: str, body: TaskReport, now: float
) -> Allocation:
    """A node's report on an allocation's task, in Core statements: its status, exit code and
    output tail; a task's end releases the allocation and hands its GPUs to the queue. 404
    unless the allocation's GPUs (now, or last) include one on this node."""
    session.flush()  # the Core reads below must see this transaction's ORM changes
    row = sql.row(session, sql.ALLOCATION_BY_ID, {"id": allocation_id})
    shown = shown_gpus(sql.run(session, sql.ALLOCATION_GPUS, {"owner": allocation_id}).fetchall())
    if row is None or all(node != node_id for _, node in shown):
        raise NotFound(f"allocation {allocation_id} not found on node {node_id}")
    lifecycle.forget_loaded(session, allocation_id)
    alloc = SimpleNamespace(**row)
    alloc.task_status = body.status.value
    if body.exit_code is not None:
        alloc.exit_code = body.exit_code
    if body.output_tail is not None:
        alloc.output_tail = body.output_tail
    ends = body.status in FINAL_TASK and alloc.status == ALLOCATED
    if ends:
        check_transition("allocation", ALLOCATED, RELEASED)
        alloc.status, alloc.released_at = RELEASED, now
        alloc.reason = f"task {body.status.value} (exit {body.exit_code})"
    sql.send(
        session,
        sql.TASK_REPORTED,
        {
            "alloc": alloc.id,
            "task": alloc.task_status,
            "code": alloc.exit_code,
            "tail": alloc.output_tail,
            "status": alloc.status,
            "released": alloc.released_at,
            "why": alloc.reason,
        },
    )
    if ends:
        return _released(session, alloc, now=now)
    gpus = placing.load_cluster(session).describe([uuid for uuid, _ in shown])
    return allocation_view(session, alloc, gpus=gpus)  # type: ignore[arg-type]


def _released(
    session: Session,
    alloc: SimpleNamespace,
    *,
    now: float,
    ended: Sequence[Any] | None = None,
    shares: Sequence[Any] | None = None,
) -> Allocation:
    """What follows an allocation's release (its row already updated): the event, its GPUs
    freed, its usage charged, the queue served; its view. `ended` and `shares`: its ended
    assignments and the queue's tenants, when read already."""
    events.record(
        session,
        kind="allocation",
        object_id=alloc.id,
        tenant_id=alloc.tenant_id,
        from_state=ALLOCATED,
        to_state=RELEASED,
        at=now,
        reason=alloc.reason,
    )
    if ended is None:
        freed = lifecycle.end_assignments(session, now=now, allocation_id=alloc.id)
    else:
        freed = lifecycle.freed(session, ended)
    gpu_s = 0.0
    if alloc.allocated_at is not None:
        gpu_s = alloc.gpu_count * (now - alloc.allocated_at)
        lifecycle.charge_usage(session, alloc.tenant_id, gpu_s, now)
    if shares is None:
        served = granting.schedule_pending(session, now=now)
    else:
        # Read before the charge above: the queue's order counts it in.
        served = granting.schedule_pending(
            session, now=now, shares=shares, charged=(alloc.tenant_id, gpu_s)
        )
    if not served:
        running_changed(session, alloc, gpus=-alloc.gpu_count)
    gpus = placing.load_cluster(session).describe(freed)
    return allocation_view(session, alloc, gpus=gpus)  # type: ignore[arg-type]


def shown_gpus(rows: Sequence[Any]) -> list[tuple[str, str]]:
    """(uuid, node id) of the GPUs an allocation's view shows, from its `ALLOCATION_GPUS` rows:
    those it has now, or, once it has none, those of its last assignment."""
    active = [(uuid, node) for uuid, node, ended, _ in rows if ended is None]
    if active or not rows:
        return active
    last = max(started for *_, started in rows)
    return [(uuid, node) for uuid, node, _, started in rows if started == last]
