"""The FastAPI application: wiring of settings, database, clock, routers and error mapping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI
from starlette.types import ASGIApp

from control_plane.api import docs, errors, observability
from control_plane.api.hotroutes import HotRoutes
from control_plane.api.keycache import KeyCache
from control_plane.api.limits import BodySizeLimit
from control_plane.api.nodework import NodeWorkBoard
from control_plane.api.ratelimit import AnonymousRateLimit, RateLimiter, RateLimits
from control_plane.api.roles import RoleGate
from control_plane.api.routers import allocations, health, holds, node_identity, nodes, tenants
from control_plane.config import ServerSettings
from control_plane.db import migrate
from control_plane.db.engine import Database
from control_plane.services.heartbeats import Flusher, HeartbeatBuffer
from control_plane.services.writer import GroupWriter


class ControlPlaneApp(FastAPI):
    """FastAPI with two steps in front of its whole middleware stack.

    First the request observer: every request, refused ones too, gets an id, a log line and
    its latency. Then the hot routes (hotroutes.py), which serve the ordinary allocate,
    release, task report and heartbeat themselves and hand everything else to the framework's
    stack (error middleware, limits, routing) with the body they read. In front of that stack,
    not inside it, they skip its layers' per-request cost; they bound the body and answer
    their own failures as that stack would."""

    instruments: observability.Instruments

    def build_middleware_stack(self) -> ASGIApp:
        framework = super().build_middleware_stack()
        settings = self.state.settings
        hot: ASGIApp = HotRoutes(
            framework,
            counter=self.instruments.hot_routes,
            max_body_bytes=settings.max_body_bytes,
        )
        if settings.role != "all":
            hot = RoleGate(hot, role=settings.role)
        return observability.RequestObserver(hot, histogram=self.instruments.requests)


def create_app(
    settings: ServerSettings | None = None,
    *,
    db: Database | None = None,
    clock: Callable[[], float] = time.time,
    key_cache_ttl_s: float = 5.0,
    rate_clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    settings = settings or ServerSettings()
    database = db or Database(settings.database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.migrate:
            migrate.upgrade(database)
        app.state.node_work.bind(asyncio.get_running_loop())
        if app.state.loop_reader is not None:
            app.state.loop_reader.bind(asyncio.get_running_loop())
        unhook = database.on_commit(app.state.node_work.publish)
        watch = ticker = None
        if settings.run_jobs:
            from control_plane.jobs.stalls import StallWatch, beat_loop

            # Measures the server's own stalls, so that liveness never blames nodes for them.
            watch = StallWatch(threshold_s=settings.stall_threshold_s)
            ticker = asyncio.create_task(beat_loop(watch))
        app.state.stall_watch = watch
        flusher = None
        if app.state.heartbeats is not None:
            on_flush = None
            if watch is not None:
                watch.expect("heartbeat flush", settings.heartbeat_flush_s)
                on_flush = partial(watch.beat, "heartbeat flush")
            flusher = Flusher(
                app.state.heartbeats,
                app.state.writer,
                settings.heartbeat_flush_s,
                on_flush=on_flush,
            )
            flusher.start()
        runner = None
        if settings.run_jobs:
            from control_plane.jobs.runner import JobRunner

            runner = JobRunner(
                database,
                settings=settings,
                clock=clock,
                watch=watch,
                writer=app.state.writer,
            )
            runner.start()
        app.state.jobs = runner
        try:
            yield
        finally:
            unhook()
            if ticker is not None:
                ticker.cancel()
            if flusher is not None:
                flusher.stop()
            if runner is not None:
                runner.stop()
            app.state.writer.stop()
            if app.state.loop_reader is not None:
                await app.state.loop_reader.close()
            if db is None:
                database.dispose()

    app = ControlPlaneApp(
        title="jitgpu control plane",
        version="1",
        description="Pre-warm GPUs just in time: holds, claims and allocations.",
        lifespan=lifespan,
        docs_url=None,  # served offline by docs.install
        redoc_url=None,
        # Metrics are Prometheus (/metrics) and logs our own: FastAPI's OpenTelemetry hooks
        # would only look up, on every request, whether a provider was configured.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.db = database
    app.state.clock = clock
    # The hot write commands (allocate, release, renew, holds, claims) share commits here.
    app.state.writer = GroupWriter(database, clock)
    app.state.key_cache = KeyCache(ttl_s=key_cache_ttl_s)
    # PostgreSQL: heartbeats read on the event loop, not on worker threads (hotbeat.py).
    app.state.loop_reader = database.loop_reader()
    app.state.jobs = None
    app.state.node_work = NodeWorkBoard()
    app.state.heartbeats = HeartbeatBuffer() if settings.heartbeat_flush_s > 0 else None
    instruments = observability.make_registry(database)
    app.state.metrics = instruments.registry
    app.state.rate_limiter = (
        RateLimiter(RateLimits.from_settings(settings), clock=rate_clock)
        if settings.rate_limits
        else None
    )
    errors.install(app)
    app.instruments = instruments
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if app.state.rate_limiter is not None:
        app.add_middleware(AnonymousRateLimit, limiter=app.state.rate_limiter)
    # Matched in this order: the hot routes (allocations, holds, heartbeats) come first.
    for module in (allocations, holds, nodes, node_identity, tenants, health, observability):
        app.include_router(module.router)
    docs.install(app)
    return app
