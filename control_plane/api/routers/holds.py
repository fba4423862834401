"""Hold routes: create a speculative hold, read, list, cancel, and claim it into an allocation."""

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
from control_plane.schemas.allocations import Allocation, Hold, HoldClaim, HoldCreate
from control_plane.schemas.enums import HoldStatus
from control_plane.services import allocations, claims, holds, queries
from control_plane.services.auth import Principal

router = APIRouter(prefix="/v1/holds", tags=["holds"], responses=ERROR_RESPONSES)


@router.post("", status_code=201, response_model=Hold)
async def create_hold(
    body: HoldCreate,
    request: Request,
    who: Principal = Depends(tenant),
    key: str | None = Depends(idempotency_key),
) -> Response:
    tenant_id = who.tenant_id
    assert tenant_id is not None
    lead = request.app.state.settings.default_lead_s
    return await created(
        request,
        who=who,
        key=key,
        body=body,
        use_case=lambda session, now: holds.create(
            session, tenant_id=tenant_id, body=body, now=now, default_lead_s=lead
        ),
    )


@router.get("", response_model=list[Hold])
def list_holds(
    status: list[HoldStatus] | None = Query(default=None),
    limit: int = Query(default=100, ge=1, le=1000),
    db: Database = Depends(get_db),
    who: Principal = Depends(tenant_or_admin),
) -> list[Hold]:
    return queries.list_holds(db, tenant_id=who.tenant_id, statuses=status, limit=limit)


@router.get("/{hold_id}", response_model=Hold)
def get_hold(
    hold_id: IdPath, db: Database = Depends(get_db), who: Principal = Depends(tenant_or_admin)
) -> Hold:
    with db.read() as session:
        return holds.get(session, tenant_id=who.tenant_id, hold_id=hold_id)


@router.delete("/{hold_id}", response_model=Hold)
async def cancel_hold(
    hold_id: IdPath, request: Request, who: Principal = Depends(tenant_or_admin)
) -> Response:
    return await written(
        request,
        lambda session, now: holds.cancel(
            session, tenant_id=who.tenant_id, hold_id=hold_id, now=now
        ),
    )


@router.post(
    "/{hold_id}/claim",
    status_code=201,
    response_model=Allocation,
    responses={202: {"model": Allocation, "description": "Queued: the hold was not placed yet"}},
)
async def claim_hold(
    hold_id: IdPath,
    request: Request,
    body: HoldClaim | None = None,
    who: Principal = Depends(tenant),
    key: str | None = Depends(idempotency_key),
) -> Response:
    tenant_id = who.tenant_id
    assert tenant_id is not None
    claim = body or HoldClaim()
    return await created(
        request,
        who=who,
        key=key,
        body=claim,
        use_case=lambda session, now: allocations.answer(
            claims.claim_hold(session, tenant_id=tenant_id, hold_id=hold_id, body=claim, now=now)
        ),
    )
