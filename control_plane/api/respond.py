"""Run a creating use case (idempotently when a key is given) and answer with its status."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlmodel import Session

from control_plane.services import idempotency
from control_plane.services.auth import Principal


def created(
    request: Request,
    *,
    who: Principal,
    key: str | None,
    body: BaseModel,
    use_case: Callable[[Session, float], tuple[int, BaseModel]],
) -> JSONResponse:
    status, data = idempotency.run(
        request.app.state.db,
        owner=who.idempotency_owner,
        key=key,
        fingerprint=idempotency.request_hash(request.method, request.url.path, body),
        clock=request.app.state.clock,
        use_case=use_case,
    )
    return JSONResponse(data, status_code=status)
