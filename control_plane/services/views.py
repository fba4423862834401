"""Rows to wire models, batching the GPU look-ups so that a list is a fixed number of queries."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import or_
from sqlmodel import Session, col, select

from control_plane.db.models import (
    AllocationRow,
    AssignmentRow,
    GpuRow,
    HoldRow,
    NodeRow,
    TenantRow,
)
from control_plane.schemas.allocations import Allocation, AssignedGpu, Hold
from control_plane.schemas.common import utc_from_epoch
from control_plane.schemas.enums import AllocationStatus
from control_plane.schemas.tenants import Tenant


def tenant_view(row: TenantRow) -> Tenant:
    return Tenant(
        id=row.id,
        name=row.name,
        quota_gpus=row.quota_gpus,
        burst_gpus=row.burst_gpus,
        online_share=row.online_share,
        weight=row.weight,
        created_at=utc_from_epoch(row.created_at),
    )


def _gpus_by_owner(
    session: Session, *, hold_ids: Sequence[str] = (), allocation_ids: Sequence[str] = ()
) -> dict[str, list[AssignedGpu]]:
    """GPUs of each hold/allocation: the ones it has now, or, once it has none, its last set.

    A re-placed hold has ended assignments on the GPUs it lost; they are history, not GPUs it
    holds. An ended hold or allocation still names the GPUs it had when it ended (the ones
    assigned last: a hold's GPUs are always assigned together).
    """
    if not hold_ids and not allocation_ids:
        return {}
    conditions = []
    if hold_ids:
        conditions.append(col(AssignmentRow.hold_id).in_(hold_ids))
    if allocation_ids:
        conditions.append(col(AssignmentRow.allocation_id).in_(allocation_ids))
    rows = session.exec(
        select(AssignmentRow, GpuRow.index, NodeRow.name)
        .join(GpuRow, col(GpuRow.uuid) == col(AssignmentRow.gpu_uuid))
        .join(NodeRow, col(NodeRow.id) == col(AssignmentRow.node_id))
        .where(or_(*conditions))
        .order_by(col(AssignmentRow.id))
    ).all()
    hold_set, alloc_set = set(hold_ids), set(allocation_ids)
    # owner -> rank of the set shown and its GPUs: every active row outranks every ended one,
    # and among ended rows the latest assigned win.
    shown: dict[str, tuple[tuple[bool, float], list[AssignedGpu]]] = {}
    for assignment, index, node_name in rows:
        gpu = AssignedGpu(
            uuid=assignment.gpu_uuid, node=node_name, node_id=assignment.node_id, index=index
        )
        active = assignment.ended_at is None
        rank = (True, 0.0) if active else (False, assignment.started_at)
        for owner, owners in (
            (assignment.allocation_id, alloc_set),
            (assignment.hold_id, hold_set),
        ):
            if owner not in owners:
                continue
            current = shown.get(owner)
            if current is None or rank > current[0]:
                shown[owner] = (rank, [gpu])
            elif rank == current[0]:
                current[1].append(gpu)
    return {owner: gpus for owner, (_, gpus) in shown.items()}


def allocation_views(session: Session, rows: Sequence[AllocationRow]) -> list[Allocation]:
    gpus = _gpus_by_owner(session, allocation_ids=[r.id for r in rows])
    return [_allocation(row, gpus.get(row.id, [])) for row in rows]


def allocation_view(
    session: Session, row: AllocationRow, gpus: list[AssignedGpu] | None = None
) -> Allocation:
    """One allocation; `gpus` (when the caller knows them) saves the look-up."""
    if gpus is not None:
        return _allocation(row, gpus)
    return allocation_views(session, [row])[0]


def time_to_gpu(row: AllocationRow) -> tuple[float | None, str | None]:
    """Time-to-GPU when it was measured, else None and why it is not known.

    Measured: a claim of warm GPUs, or a warm-up the node ran and reported. A cold
    assignment without a warm-up is not: the job's own start (driver, CUDA context,
    weights) happens after it and is never seen here, so 0 would be a false figure.
    """
    if row.ready_at is None:
        if row.status == AllocationStatus.PENDING.value:
            return None, "not yet known: the request waits for GPUs"
        if row.allocated_at is None:
            return None, "never got GPUs"
        return None, "not yet known: the node is warming the GPUs"
    if not row.warm and row.warmup is None and row.ready_at == row.allocated_at:
        waited = max(0.0, row.allocated_at - row.requested_at)
        return None, (
            f"cold start not measured: GPUs assigned {waited:.1f}s after the request, then "
            "the job started them itself (give a warm-up profile to have it measured)"
        )
    return max(0.0, row.ready_at - row.requested_at), None


def _allocation(row: AllocationRow, gpus: list[AssignedGpu]) -> Allocation:
    ttg, ttg_note = time_to_gpu(row)
    return Allocation(
        id=row.id,
        tenant_id=row.tenant_id,
        status=row.status,
        gpu_count=row.gpu_count,
        gpu_model=row.gpu_model,
        gpus=gpus,
        hold_id=row.hold_id,
        warm=row.warm,
        time_to_gpu_s=ttg,
        time_to_gpu_note=ttg_note,
        requested_at=utc_from_epoch(row.requested_at),
        allocated_at=utc_from_epoch(row.allocated_at),
        ready_at=utc_from_epoch(row.ready_at),
        released_at=utc_from_epoch(row.released_at),
        expires_at=utc_from_epoch(row.expires_at),
        lease_s=row.lease_s,
        strategy=row.strategy,
        job_class=row.job_class,
        label=row.label,
        warmup=row.warmup,
        command=json.loads(row.command_json) if row.command_json else None,
        task_status=row.task_status,
        exit_code=row.exit_code,
        output_tail=row.output_tail,
        reason=row.reason,
        preempted_holds=json.loads(row.preempted_json) if row.preempted_json else [],
    )


def hold_views(session: Session, rows: Sequence[HoldRow]) -> list[Hold]:
    gpus = _gpus_by_owner(session, hold_ids=[r.id for r in rows])
    return [_hold(row, gpus.get(row.id, [])) for row in rows]


def hold_view(session: Session, row: HoldRow) -> Hold:
    return hold_views(session, [row])[0]


def _hold(row: HoldRow, gpus: list[AssignedGpu]) -> Hold:
    return Hold(
        id=row.id,
        tenant_id=row.tenant_id,
        status=row.status,
        gpu_count=row.gpu_count,
        gpu_model=row.gpu_model,
        gpus=gpus,
        start_at=utc_from_epoch(row.start_at),
        ttl_s=row.ttl_s,
        lead_s=row.lead_s,
        expires_at=utc_from_epoch(row.expires_at),
        confidence=row.confidence,
        source=row.source,
        warmup=row.warmup,
        strategy=row.strategy,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
        placed_at=utc_from_epoch(row.placed_at),
        ready_at=utc_from_epoch(row.ready_at),
        warmup_s=row.warmup_s,
        ended_at=utc_from_epoch(row.ended_at),
        allocation_id=row.allocation_id,
        reason=row.reason,
    )
