"""Request ids, access logs and request metrics, as one cheap ASGI middleware; and /metrics."""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.logs import request_id
from control_plane.metrics import ClusterCollector, placement_seconds

access = logging.getLogger("jitgpu.access")
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class Instruments:
    """What the request path records into, per app (tests build many apps)."""

    registry: CollectorRegistry
    requests: Histogram
    # Allocate and release requests by the path that answered them: "hot" (api/hotroutes.py)
    # or "framework" (the FastAPI route, for anything not ordinary).
    hot_routes: Counter


def make_registry(db: object) -> Instruments:
    """A registry per app: request latency, the hot routes' share, placement, the cluster."""
    registry = CollectorRegistry()
    requests = Histogram(
        "jitgpu_request_seconds",
        "Request latency by route.",
        ["method", "route", "status"],
        buckets=BUCKETS,
        registry=registry,
    )
    hot_routes = Counter(
        "jitgpu_hot_route_requests",
        "Allocate and release requests by the path that served them (hot or framework).",
        ["route", "path"],
        registry=registry,
    )
    registry.register(placement_seconds)
    registry.register(ClusterCollector(db))
    return Instruments(registry=registry, requests=requests, hot_routes=hot_routes)


class RequestObserver:
    """Gives each request an id (X-Request-ID in and out), times it and logs one line."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram
        # Ids are a random prefix per server and a count: unique, and no system call per
        # request for random bytes (uuid4 made one).
        prefix = secrets.token_hex(4)
        self._ids = (f"{prefix}{n:08x}" for n in itertools.count())
        # The histogram's children by labels: labels() per request takes a lock.
        self._children: dict[tuple[str, str, str], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")[:64]
        rid = incoming if incoming.isprintable() and incoming else next(self._ids)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            labels = (scope["method"], template, f"{status // 100}xx")
            child = self._children.get(labels)
            if child is None:
                child = self._children[labels] = self.histogram.labels(*labels)
            child.observe(elapsed)
            access.info(
                "%s %s %d",
                scope["method"],
                template,
                status,
                extra={
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                    "path": scope.get("path"),
                },
            )
            request_id.reset(token)


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    registry = request.app.state.metrics
    # Collecting reads the database; keep it off the event loop.
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
