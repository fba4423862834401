"""Allocate, release, task reports and heartbeats without the framework's per-request machinery.

`POST /v1/allocations`, `DELETE /v1/allocations/{id}`, a node's task reports (`POST
/v1/nodes/{node}/allocations/{id}/task`, two per job) and its heartbeats (`hotbeat.py`) are
most of what a busy control plane serves. FastAPI's routing, dependency solving, exception
middleware and response classes cost more CPU per request than the write itself (measured in
BENCHMARKS.md), so this middleware serves the ordinary case of these routes directly: a
cached key of the right scope (a node's for its own node), a JSON body that validates, no
query string. Everything else (a key not yet cached, a body that fails validation, a
duplicated header, an odd content type, a node acting as another) is handed, with the body
it read, to the FastAPI route, which answers it as it always did. Once a request is served
here, it is served by the same service calls, the same writer and the same error mapping as
the route; the route stays the documented (OpenAPI) and tested contract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.asgisteps import (
    ANSWERING,
    Decline,
    answer,
    answer_error,
    bearer,
    headers_of,
    json_body,
    read_body,
    replay,
)
from control_plane.api.hotbeat import HEARTBEAT, heartbeat
from control_plane.schemas.allocations import AllocationCreate
from control_plane.schemas.common import ID_PATTERN
from control_plane.schemas.enums import Scope as KeyScope
from control_plane.schemas.nodes import TaskReport
from control_plane.services import allocations, idempotency, tasks
from control_plane.services.auth import Principal

COLLECTION = "/v1/allocations"
ONE = "/v1/allocations/{allocation_id}"
TASK = "/v1/nodes/{node_id}/allocations/{allocation_id}/task"
_ITEM_PREFIX = COLLECTION + "/"
_ID = re.compile(ID_PATTERN)
_BARE_ID = ID_PATTERN.strip("^$")
_TASK = re.compile(f"/v1/nodes/({_BARE_ID})/allocations/({_BARE_ID})/task")
_HEARTBEAT = re.compile(f"/v1/nodes/({_BARE_ID})/heartbeat")


@dataclass(frozen=True)
class RouteTemplate:
    """What the request observer reads of `scope["route"]`: the path template."""

    path: str


_TEMPLATES = {t: RouteTemplate(t) for t in (COLLECTION, ONE, TASK, HEARTBEAT)}


class HotRoutes:
    """Serve the ordinary allocate, release, task report and heartbeat requests; pass every
    other request on."""

    def __init__(self, app: ASGIApp, counter: Counter, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        # Children made once: labels() per request would cost a dict lookup and a lock.
        self._served = {
            (template, path): counter.labels(f"{method} {template}", path)
            for template, method in (
                (COLLECTION, "POST"),
                (ONE, "DELETE"),
                (TASK, "POST"),
                (HEARTBEAT, "POST"),
            )
            for path in ("hot", "framework")
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        try:
            if method == "POST" and path == COLLECTION:
                await self._create(scope, receive, send)
            elif (
                method == "DELETE"
                and path.startswith(_ITEM_PREFIX)
                and _ID.fullmatch(path[len(_ITEM_PREFIX) :])
            ):
                await self._release(scope, receive, send, path[len(_ITEM_PREFIX) :])
            elif method == "POST" and (task := _TASK.fullmatch(path)) is not None:
                await self._report_task(scope, receive, send, task.group(1), task.group(2))
            elif method == "POST" and (beat := _HEARTBEAT.fullmatch(path)) is not None:
                await heartbeat(self, scope, receive, send, beat.group(1))
            else:
                scope[ANSWERING] = True  # the framework's, errors included
                await self.app(scope, receive, send)
        except Exception as exc:
            # This path runs outside the framework's error middleware: an unexpected failure
            # before the answer began is answered as the framework would (500, JSON, logged).
            if scope.get(ANSWERING):
                raise
            await answer_error(scope, send, exc)

    # The two routes

    async def _create(self, scope: Scope, receive: Receive, send: Send) -> None:
        messages, body = await read_body(receive, self.max_body_bytes)
        try:
            headers = headers_of(scope)
            who = _caller(scope, headers, KeyScope.TENANT)
            key_bytes = headers.get(b"idempotency-key")
            if key_bytes is not None and not 1 <= len(key_bytes) <= 128:
                raise Decline
            model = AllocationCreate.model_validate(json_body(headers, body))
        except (Decline, ValidationError):
            await self.decline(COLLECTION, scope, replay(messages, receive), send)
            return
        key = key_bytes.decode("latin-1") if key_bytes is not None else None
        state = scope["app"].state
        tenant_id = who.tenant_id
        max_queued = state.settings.max_queued_per_tenant
        path = scope["path"]
        await self._answer(
            scope,
            send,
            who,
            owner=who.idempotency_owner,
            key=key,
            fingerprint=lambda: idempotency.request_hash("POST", path, model),
            use_case=lambda session, now: allocations.create(
                session, tenant_id=tenant_id, body=model, now=now, max_queued=max_queued
            ),
            template=COLLECTION,
        )

    async def _release(self, scope: Scope, receive: Receive, send: Send, alloc_id: str) -> None:
        try:
            who = _caller(scope, headers_of(scope), KeyScope.TENANT, KeyScope.ADMIN)
        except Decline:
            await self.decline(ONE, scope, receive, send)
            return
        tenant_id = who.tenant_id
        await self._answer(
            scope,
            send,
            who,
            use_case=lambda session, now: (
                200,
                allocations.release(session, tenant_id=tenant_id, allocation_id=alloc_id, now=now),
            ),
            template=ONE,
        )

    async def _report_task(
        self, scope: Scope, receive: Receive, send: Send, node_id: str, alloc_id: str
    ) -> None:
        messages, body = await read_body(receive, self.max_body_bytes)
        try:
            headers = headers_of(scope)
            who = _caller(scope, headers, KeyScope.NODE, KeyScope.ADMIN)
            # A node's credential acts as its own node only; the route says why not (403).
            if who.scope == KeyScope.NODE and who.node_id != node_id:
                raise Decline
            report = TaskReport.model_validate(json_body(headers, body))
        except (Decline, ValidationError):
            await self.decline(TASK, scope, replay(messages, receive), send)
            return
        await self._answer(
            scope,
            send,
            who,
            use_case=lambda session, now: (
                200,
                tasks.report(
                    session, node_id=node_id, allocation_id=alloc_id, body=report, now=now
                ),
            ),
            template=TASK,
        )

    # Shared steps

    async def decline(self, template: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Not the ordinary case: the framework's route answers it."""
        self._served[template, "framework"].inc()
        scope[ANSWERING] = True
        await self.app(scope, receive, send)

    async def _answer(
        self,
        scope: Scope,
        send: Send,
        who: Principal,
        *,
        template: str,
        **command: Any,
    ) -> None:
        self.serving(scope, template)
        state = scope["app"].state
        try:
            if state.rate_limiter is not None:
                state.rate_limiter.charge(who)
            status, text = await state.writer.call(**command)
        except Exception as exc:  # mapped exactly as the framework's handlers map it
            await answer_error(scope, send, exc)
            return
        await answer(scope, send, status, text.encode())

    def serving(self, scope: Scope, template: str) -> None:
        """Count the request as served here; the request log and metrics name the route by
        its template, read from `scope["route"]`."""
        scope["route"] = _TEMPLATES[template]
        self._served[template, "hot"].inc()


def _caller(scope: Scope, headers: dict[bytes, bytes], *scopes: KeyScope) -> Principal:
    """The cached principal of the request's key, if it may call this route; else decline.

    A key not in the cache (first use, or expired from it) goes through the framework's
    dependency, which looks it up and caches it; so does every refusal."""
    who = scope["app"].state.key_cache.get(bearer(headers))
    if who is None or who.scope not in scopes:
        raise Decline
    return who
