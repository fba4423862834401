"""Steps shared by the routes served below the framework: headers, body, token, answers."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from control_plane.api.errors import response_for
from control_plane.services import auth
from control_plane.services.errors import Unauthenticated

# The headers these routes read; any of them twice, and the framework decides what it means.
_READ = (b"authorization", b"content-type", b"idempotency-key")
_JSON_HEADERS = [(b"content-type", b"application/json")]


class Decline(Exception):
    """Not the ordinary case: the framework's route answers this request."""


# Set in a request's scope once its answer is under way (or the framework has the request):
# past that, a failure cannot be answered again.
ANSWERING = "jitgpu.answering"


async def answer_error(scope: Scope, send: Send, exc: Exception) -> None:
    """An exception mapped exactly as the framework's handlers map it."""
    scope[ANSWERING] = True
    await response_for(exc)(scope, _no_body, send)


async def answer(scope: Scope, send: Send, status: int, body: bytes) -> None:
    """A JSON answer already serialised."""
    scope[ANSWERING] = True
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """The headers this path reads; declines a query string (no route here takes one) and
    a header it reads sent twice."""
    if scope.get("query_string"):
        raise Decline
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in _READ:
            if name in found:
                raise Decline
            found[name] = value
    return found


def json_bytes(headers: dict[bytes, bytes], body: bytes | None) -> bytes:
    """The body of a request that says it sends JSON; else decline."""
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if body is None or content_type != b"application/json":
        raise Decline
    return body


def json_body(headers: dict[bytes, bytes], body: bytes | None) -> Any:
    """The parsed JSON body of a request that says it sends JSON; else decline."""
    try:
        return json.loads(json_bytes(headers, body))
    except (ValueError, RecursionError):
        # Not JSON, or nested past the decoder's depth: the route says which (400 or 422).
        raise Decline from None


def bearer(headers: dict[bytes, bytes]) -> str:
    """The request's bearer token; a missing or malformed one declines (the framework's
    dependency answers it, and counts it against the caller's address)."""
    raw = headers.get(b"authorization")
    try:
        return auth.parse_bearer(raw.decode("latin-1") if raw is not None else None)
    except Unauthenticated:
        raise Decline from None


async def read_body(receive: Receive, max_bytes: int) -> tuple[list[Message], bytes | None]:
    """Every message of the body, to replay if the framework takes over, and the body (None if
    the client went away, or once it passes `max_bytes`: the framework's body limit then
    refuses it from the replayed messages)."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > max_bytes:
            return messages, None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return messages, b"".join(chunks)


def replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
