"""Every failure becomes a JSON body {"error": {"code", "message", "field"}}; never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from control_plane.scheduling.transitions import IllegalTransition
from control_plane.schemas.common import ErrorBody
from control_plane.services.errors import ServiceError

log = logging.getLogger("jitgpu.api")

HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
}

# The documented error body, for the OpenAPI responses of every route.
ERROR_RESPONSES = {
    code: {"model": ErrorBody, "description": name}
    for code, name in (
        (400, "Bad request"),
        (401, "Missing or bad API key"),
        (403, "Key lacks the scope or the policy forbids it"),
        (404, "Not found"),
        (409, "Conflict"),
        (413, "Body too large"),
        (422, "Invalid request"),
        (429, "Quota or budget exceeded"),
        (503, "Database unavailable"),
    )
}


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "field": field}}
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=headers or None)


def _field_of(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or None


def _allowed_methods(request: Request) -> str:
    """Every method any route serves at this path (the router names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def response_for(exc: Exception) -> JSONResponse:
    """The JSON answer for an exception a route raised: the one mapping both the framework's
    handlers and the hot routes (api/hotroutes.py) use, so the two paths answer alike."""
    if isinstance(exc, ServiceError):
        headers = getattr(exc, "headers", None)  # e.g. Retry-After of a rate limit
        return error_response(exc.status_code, exc.code, exc.message, exc.field, headers=headers)
    if isinstance(exc, IllegalTransition):
        return error_response(409, "illegal_transition", str(exc))
    if isinstance(exc, (OperationalError, PoolTimeout)):
        log.warning("database unavailable: %s", exc.__class__.__name__)
        return error_response(
            503, "database_unavailable", "the database is unavailable; retry shortly"
        )
    if isinstance(exc, DataError):
        # The schemas bound every value, so this is a gap in them; still the client's input,
        # never a server fault. The driver's text may quote the value: only its class is logged.
        log.warning("database refused a value: %s", exc.orig.__class__.__name__)
        return error_response(
            422,
            "invalid_request",
            "a value in the request cannot be stored (out of range or an invalid character)",
        )
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return error_response(
            503, "database_unavailable", "the database connection was lost; retry shortly"
        )
    if isinstance(exc, DBAPIError):
        log.exception("database error", exc_info=exc)
    else:
        log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal error; see the server log")


def install(app: FastAPI) -> None:
    async def _mapped(_request: Request, exc: Exception) -> JSONResponse:
        return response_for(exc)

    for kind in (
        ServiceError,
        IllegalTransition,
        OperationalError,
        PoolTimeout,
        DataError,
        DBAPIError,
        Exception,
    ):
        app.add_exception_handler(kind, _mapped)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field = _field_of(tuple(first.get("loc", ())))
        message = str(first.get("msg", "invalid request"))
        if field:
            message = f"{field}: {message}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_response(422, "invalid_request", message, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(request)
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)
