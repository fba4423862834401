"""Allocation routes: create (place, queue or refuse), read, list, renew and release."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from control_plane.api.deps import (
    IdPath,
    get_db,
    idempotency_key,
    tenant,
    tenant_or_admin,
)
from control_plane.api.errors import ERROR_RESPONSES
from control_plane.api.respond import created, written
from control_plane.db.engine import Database
from control_plane.schemas.allocations import Allocation, AllocationCreate, AllocationRenew
from control_plane.schemas.enums import AllocationStatus
from control_plane.services import allocations, queries
from control_plane.services.auth import Principal

router = APIRouter(prefix="/v1/allocations", tags=["allocations"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=201,
    response_model=Allocation,
    responses={202: {"model": Allocation, "description": "Queued: no GPUs free yet"}},
)
async def create_allocation(
    body: AllocationCreate,
    request: Request,
    who: Principal = Depends(tenant),
    key: str | None = Depends(idempotency_key),
) -> Response:
    tenant_id = who.tenant_id
    assert tenant_id is not None
    max_queued = request.app.state.settings.max_queued_per_tenant
    return await created(
        request,
        who=who,
        key=key,
        body=body,
        use_case=lambda session, now: allocations.create(
            session, tenant_id=tenant_id, body=body, now=now, max_queued=max_queued
        ),
    )


@router.get("", response_model=list[Allocation])
def list_allocations(
    status: list[AllocationStatus] | None = Query(default=None),
    limit: int = Query(default=100, ge=1, le=1000),
    db: Database = Depends(get_db),
    who: Principal = Depends(tenant_or_admin),
) -> list[Allocation]:
    return queries.list_allocations(db, tenant_id=who.tenant_id, statuses=status, limit=limit)


@router.get("/{allocation_id}", response_model=Allocation)
def get_allocation(
    allocation_id: IdPath, db: Database = Depends(get_db), who: Principal = Depends(tenant_or_admin)
) -> Allocation:
    return queries.get_allocation(db, tenant_id=who.tenant_id, allocation_id=allocation_id)


@router.delete("/{allocation_id}", response_model=Allocation)
async def release_allocation(
    allocation_id: IdPath, request: Request, who: Principal = Depends(tenant_or_admin)
) -> Response:
    return await written(
        request,
        lambda session, now: allocations.release(
            session, tenant_id=who.tenant_id, allocation_id=allocation_id, now=now
        ),
    )


@router.post("/{allocation_id}/renew", response_model=Allocation)
async def renew_allocation(
    allocation_id: IdPath,
    body: AllocationRenew,
    request: Request,
    who: Principal = Depends(tenant),
) -> Response:
    # Only the owning tenant extends its own lease (another tenant gets 404); an admin who
    # wants GPUs back releases instead. The placement lock orders it with the lease expiry.
    tenant_id = who.tenant_id
    assert tenant_id is not None
    return await written(
        request,
        lambda session, now: allocations.renew(
            session, tenant_id=tenant_id, allocation_id=allocation_id, body=body, now=now
        ),
    )
