"""Request dependencies: the database, the clock, and who is calling (by bearer API key)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State

from control_plane.db.engine import Database
from control_plane.schemas.common import ID_PATTERN
from control_plane.schemas.enums import Scope
from control_plane.services import auth
from control_plane.services.auth import Principal
from control_plane.services.errors import Forbidden, ServiceError, Unauthenticated

# An id in a path is checked before any query: one that cannot exist is a 422 naming the
# parameter, and no odd byte (a NUL, say) ever reaches the database.
IdPath = Annotated[str, Path(min_length=1, max_length=64, pattern=ID_PATTERN)]

# Dependencies are `async def` where they do not block: FastAPI runs each plain `def`
# dependency in the thread pool, and those hops cost more than the work here.


async def get_db(request: Request) -> Database:
    return request.app.state.db


async def get_clock(request: Request) -> Callable[[], float]:
    return request.app.state.clock


async def principal(
    request: Request,
    authorization: str | None = Header(default=None, include_in_schema=False),
) -> Principal:
    limiter = request.app.state.rate_limiter
    try:
        token = auth.parse_bearer(authorization)
        cache = request.app.state.key_cache
        found = cache.get(token)
        if found is None:
            found = await run_in_threadpool(_lookup, request.app.state, token)
            cache.put(token, found)
    except Unauthenticated:
        # Guessing keys costs a lookup each: bad credentials count against the address (no
        # header at all was counted already, by the anonymous limit in front of the app).
        if limiter is not None and authorization is not None:
            client = request.client
            wait = limiter.charge_anonymous(client.host if client else "unknown")
            if wait is not None:
                raise limiter.anonymous_refusal(wait) from None
        raise
    if limiter is not None:
        limiter.charge(found)
    return found


def _lookup(state: State, token: str) -> Principal:
    with state.db.read() as session:
        return auth.authenticate(session, token=token, admin_token=state.settings.admin_token)


async def admin(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.ADMIN)
    return who


async def tenant(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.TENANT)
    return who


async def tenant_or_admin(who: Principal = Depends(principal)) -> Principal:
    auth.require(who, Scope.TENANT, Scope.ADMIN)
    return who


async def node_or_admin(who: Principal = Depends(principal)) -> Principal:
    """A node credential (bound to its node) or the admin; node routes add `this_node`."""
    auth.require(who, Scope.NODE, Scope.ADMIN)
    if who.scope == Scope.NODE and who.node_id is None:
        raise Forbidden(
            "this node token predates node identity: it can only enrol a node "
            "(POST /v1/nodes/enrol), which returns the node's own credential",
            code="enrolment_required",
        )
    return who


async def this_node(node_id: IdPath, who: Principal = Depends(node_or_admin)) -> Principal:
    """The path's node, and only it: a node credential never acts as another node."""
    if who.scope == Scope.NODE and who.node_id != node_id:
        raise Forbidden(
            f"this credential belongs to node {who.node_id}, not {node_id}", code="wrong_node"
        )
    return who


async def idempotency_key(
    idempotency_key: str | None = Header(
        default=None, alias="Idempotency-Key", min_length=1, max_length=128
    ),
) -> str | None:
    return idempotency_key


class IdempotencyNotSupported(ServiceError):
    status_code = 400
    code = "idempotency_not_supported"


async def no_idempotency_key(
    idempotency_key: str | None = Header(
        default=None, alias="Idempotency-Key", include_in_schema=False
    ),
) -> None:
    # The answer of these routes is a secret shown once: storing it to replay it would keep
    # the secret in the clear, and ignoring the key would make a retry mint a second one.
    if idempotency_key is not None:
        raise IdempotencyNotSupported(
            "Idempotency-Key is not supported on this route: its answer holds a secret that "
            "is never stored; send the request without the header, and revoke any extra key",
            field="Idempotency-Key",
        )
