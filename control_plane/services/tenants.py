"""Tenants and their API keys (admin use cases), and node tokens."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from control_plane.db.engine import Database
from control_plane.db.models import ApiKeyRow, TenantRow
from control_plane.schemas.common import utc_from_epoch
from control_plane.schemas.enums import Scope
from control_plane.schemas.tenants import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    Tenant,
    TenantCreate,
    TenantUpdate,
)
from control_plane.services.auth import ensure_tenant, mint_key, revoke_key
from control_plane.services.errors import Conflict
from control_plane.services.ids import new_id
from control_plane.services.views import tenant_view


def create_tenant(db: Database, *, body: TenantCreate, now: float) -> Tenant:
    try:
        with db.write() as session:
            if session.exec(select(TenantRow.id).where(TenantRow.name == body.name)).first():
                raise Conflict(
                    f"a tenant named {body.name!r} exists", code="tenant_exists", field="name"
                )
            row = TenantRow(
                id=new_id("tnt"),
                name=body.name,
                quota_gpus=body.quota_gpus,
                burst_gpus=body.burst_gpus,
                online_share=body.online_share,
                weight=body.weight,
                created_at=now,
            )
            session.add(row)
    except IntegrityError:
        # Two creations of one name raced past the check; the unique index decided.
        raise Conflict(
            f"a tenant named {body.name!r} exists", code="tenant_exists", field="name"
        ) from None
    return tenant_view(row)


def list_tenants(db: Database) -> list[Tenant]:
    with db.read() as session:
        rows = session.exec(select(TenantRow).order_by(col(TenantRow.created_at))).all()
        return [tenant_view(r) for r in rows]


def get_tenant(db: Database, *, tenant_id: str) -> Tenant:
    with db.read() as session:
        return tenant_view(ensure_tenant(session, tenant_id))


def update_tenant(db: Database, *, tenant_id: str, body: TenantUpdate) -> Tenant:
    # With the placement lock on PostgreSQL: a new quota waits for the writer's batch in
    # progress, which may reuse the tenant's read (`BatchAdmissions`), and applies to the next.
    with db.write(placement=True) as session:
        row = ensure_tenant(session, tenant_id)
        for name, value in body.model_dump(exclude_none=True).items():
            setattr(row, name, value)
        if "online_share" in body.model_fields_set and body.online_share is None:
            row.online_share = None  # an explicit null removes the split
        return tenant_view(row)


def _key_created(row: ApiKeyRow, secret: str) -> ApiKeyCreated:
    return ApiKeyCreated(
        id=row.id,
        key=secret,
        prefix=row.prefix,
        scope=Scope(row.scope),
        tenant_id=row.tenant_id,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
    )


def _key_info(row: ApiKeyRow) -> ApiKeyInfo:
    return ApiKeyInfo(
        id=row.id,
        prefix=row.prefix,
        scope=Scope(row.scope),
        tenant_id=row.tenant_id,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
        revoked_at=utc_from_epoch(row.revoked_at),
    )


def create_api_key(
    db: Database, *, tenant_id: str, body: ApiKeyCreate, now: float
) -> ApiKeyCreated:
    with db.write() as session:
        ensure_tenant(session, tenant_id)
        row, secret = mint_key(
            session, scope=Scope.TENANT, tenant_id=tenant_id, label=body.label, now=now
        )
    return _key_created(row, secret)


def list_api_keys(db: Database, *, tenant_id: str) -> list[ApiKeyInfo]:
    with db.read() as session:
        ensure_tenant(session, tenant_id)
        rows = session.exec(
            select(ApiKeyRow)
            .where(ApiKeyRow.tenant_id == tenant_id)
            .order_by(col(ApiKeyRow.created_at))
        ).all()
        return [_key_info(r) for r in rows]


def revoke_api_key(db: Database, *, tenant_id: str, key_id: str, now: float) -> ApiKeyInfo:
    with db.write() as session:
        return _key_info(revoke_key(session, tenant_id=tenant_id, key_id=key_id, now=now))
