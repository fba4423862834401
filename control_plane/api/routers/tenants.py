"""Admin routes for tenants and their API keys; policies readable by their tenant."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from control_plane.api.deps import (
    IdPath,
    admin,
    get_clock,
    get_db,
    no_idempotency_key,
    tenant_or_admin,
)
from control_plane.api.errors import ERROR_RESPONSES
from control_plane.db.engine import Database
from control_plane.schemas.tenants import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    Tenant,
    TenantCreate,
    TenantPolicy,
    TenantPolicyInfo,
    TenantUpdate,
)
from control_plane.services import policies, tenants
from control_plane.services.auth import Principal
from control_plane.services.errors import NotFound

router = APIRouter(prefix="/v1", tags=["tenants"], responses=ERROR_RESPONSES)


@router.post("/tenants", status_code=201, response_model=Tenant)
def create_tenant(
    body: TenantCreate,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> Tenant:
    return tenants.create_tenant(db, body=body, now=clock())


@router.get("/tenants", response_model=list[Tenant])
def list_tenants(db: Database = Depends(get_db), _: Principal = Depends(admin)) -> list[Tenant]:
    return tenants.list_tenants(db)


@router.get("/tenants/{tenant_id}", response_model=Tenant)
def get_tenant(
    tenant_id: IdPath, db: Database = Depends(get_db), who: Principal = Depends(tenant_or_admin)
) -> Tenant:
    _own(who, tenant_id)
    return tenants.get_tenant(db, tenant_id=tenant_id)


@router.patch("/tenants/{tenant_id}", response_model=Tenant)
def update_tenant(
    tenant_id: IdPath,
    body: TenantUpdate,
    db: Database = Depends(get_db),
    _: Principal = Depends(admin),
) -> Tenant:
    return tenants.update_tenant(db, tenant_id=tenant_id, body=body)


@router.post(
    "/tenants/{tenant_id}/api-keys",
    status_code=201,
    response_model=ApiKeyCreated,
    dependencies=[Depends(no_idempotency_key)],
)
def create_api_key(
    tenant_id: IdPath,
    body: ApiKeyCreate | None = None,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> ApiKeyCreated:
    return tenants.create_api_key(db, tenant_id=tenant_id, body=body or ApiKeyCreate(), now=clock())


@router.get("/tenants/{tenant_id}/api-keys", response_model=list[ApiKeyInfo])
def list_api_keys(
    tenant_id: IdPath, db: Database = Depends(get_db), _: Principal = Depends(admin)
) -> list[ApiKeyInfo]:
    return tenants.list_api_keys(db, tenant_id=tenant_id)


@router.delete("/tenants/{tenant_id}/api-keys/{key_id}", response_model=ApiKeyInfo)
def revoke_api_key(
    tenant_id: IdPath,
    key_id: IdPath,
    request: Request,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> ApiKeyInfo:
    info = tenants.revoke_api_key(db, tenant_id=tenant_id, key_id=key_id, now=clock())
    request.app.state.key_cache.clear()
    return info


@router.get("/policies/{tenant_id}", response_model=TenantPolicyInfo, tags=["policies"])
def get_policy(
    tenant_id: IdPath,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    who: Principal = Depends(tenant_or_admin),
) -> TenantPolicyInfo:
    _own(who, tenant_id)
    return policies.get_policy(db, tenant_id=tenant_id, now=clock())


@router.put("/policies/{tenant_id}", response_model=TenantPolicyInfo, tags=["policies"])
def put_policy(
    tenant_id: IdPath,
    body: TenantPolicy,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> TenantPolicyInfo:
    return policies.put_policy(db, tenant_id=tenant_id, body=body, now=clock())


@router.get("/me", response_model=Tenant, tags=["tenants"])
def whoami(db: Database = Depends(get_db), who: Principal = Depends(tenant_or_admin)) -> Tenant:
    if who.tenant_id is None:
        raise NotFound("an admin key belongs to no tenant")
    return tenants.get_tenant(db, tenant_id=who.tenant_id)


def _own(who: Principal, tenant_id: str) -> None:
    # A tenant reading another tenant learns nothing: the same 404 as a missing one.
    if who.tenant_id is not None and who.tenant_id != tenant_id:
        raise NotFound(f"tenant {tenant_id} not found")
