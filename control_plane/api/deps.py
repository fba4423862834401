"""Request dependencies: the database, the clock, and who is calling (by bearer API key)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, Header, Request

from control_plane.db.engine import Database
from control_plane.schemas.enums import Scope
from control_plane.services import auth
from control_plane.services.auth import Principal


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_clock(request: Request) -> Callable[[], float]:
    return request.app.state.clock


def principal(
    request: Request,
    authorization: str | None = Header(default=None, include_in_schema=False),
) -> Principal:
    token = auth.parse_bearer(authorization)
    cache = request.app.state.key_cache
    cached = cache.get(token)
    if cached is not None:
        return cached
    db: Database = request.app.state.db
    with db.read() as session:
        found = auth.authenticate(
            session, token=token, admin_token=request.app.state.settings.admin_token
        )
    cache.put(token, found)
    return found


def admin(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.ADMIN)
    return who


def tenant(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.TENANT)
    return who


def tenant_or_admin(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.TENANT, Scope.ADMIN)
    return who


def node_or_admin(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.NODE, Scope.ADMIN)
    return who


def idempotency_key(
    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key", max_length=128),
) -> str | None:
    return idempotency_key
