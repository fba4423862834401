"""API keys: minting (shown once), hashing at rest, and resolving a bearer token to a principal."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from control_plane.db.models import ApiKeyRow, TenantRow
from control_plane.schemas.enums import Scope
from control_plane.services import sql
from control_plane.services.errors import Forbidden, NotFound, Unauthenticated
from control_plane.services.ids import new_id

KEY_PREFIX = {Scope.TENANT: "jgt_", Scope.NODE: "jgn_", Scope.ADMIN: "jga_"}
MAX_TOKEN_LEN = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an admin, a node agent (with its node id), or a tenant (with its id)."""

    scope: Scope
    key_id: str
    tenant_id: str | None = None
    # The one node a node credential acts as; None for a node token from before node
    # identity, which may only enrol.
    node_id: str | None = None

    @property
    def idempotency_owner(self) -> str:
        return self.tenant_id or f"{self.scope.value}:{self.key_id}"


def hash_key(secret: str) -> str:
    # Keys carry 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


def mint_key(
    session: Session,
    *,
    scope: Scope,
    tenant_id: str | None,
    label: str | None,
    now: float,
    node_id: str | None = None,
) -> tuple[ApiKeyRow, str]:
    secret = KEY_PREFIX[scope] + secrets.token_urlsafe(32)
    row = ApiKeyRow(
        id=new_id("key"),
        key_hash=hash_key(secret),
        prefix=secret[:10],
        scope=scope.value,
        tenant_id=tenant_id,
        label=label,
        created_at=now,
        node_id=node_id,
    )
    session.add(row)
    return row, secret


def parse_bearer(header: str | None) -> str:
    if not header:
        raise Unauthenticated("missing Authorization header; send 'Authorization: Bearer <key>'")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or len(token) > MAX_TOKEN_LEN:
        raise Unauthenticated("malformed Authorization header; expected 'Bearer <key>'")
    return token


def authenticate(session: Session, *, token: str, admin_token: str | None) -> Principal:
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return Principal(scope=Scope.ADMIN, key_id="env")
    # A prebuilt statement, no ORM object: this runs for every request with an uncached key.
    return principal_of(sql.row(session, sql.API_KEY_BY_HASH, {"hash": hash_key(token)}))


def principal_of(row: Mapping[str, Any] | None) -> Principal:
    """Who an API_KEY_BY_HASH row (None: no row) makes the caller; 401 if nobody."""
    if row is None or row["revoked_at"] is not None:
        # One message for unknown and revoked keys: a caller learns nothing about which.
        raise Unauthenticated("unknown or revoked API key")
    return Principal(
        scope=Scope(row["scope"]),
        key_id=row["id"],
        tenant_id=row["tenant_id"],
        node_id=row["node_id"],
    )


def require(principal: Principal, *scopes: Scope) -> None:
    if principal.scope not in scopes:
        allowed = " or ".join(s.value for s in scopes)
        raise Forbidden(f"this route needs a {allowed} key; yours is a {principal.scope.value} key")


def revoke_key(session: Session, *, tenant_id: str, key_id: str, now: float) -> ApiKeyRow:
    row = session.get(ApiKeyRow, key_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"API key {key_id} not found")
    if row.revoked_at is None:
        row.revoked_at = now
    return row


def ensure_tenant(session: Session, tenant_id: str) -> TenantRow:
    tenant = session.get(TenantRow, tenant_id)
    if tenant is None:
        raise NotFound(f"tenant {tenant_id} not found")
    return tenant
