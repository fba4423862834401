"""The FastAPI application: wiring of settings, database, clock, routers and error mapping."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from control_plane.api import docs, errors, observability
from control_plane.api.keycache import KeyCache
from control_plane.api.limits import BodySizeLimit
from control_plane.api.routers import allocations, health, holds, nodes, tenants
from control_plane.config import ServerSettings
from control_plane.db import migrate
from control_plane.db.engine import Database
from control_plane.services.heartbeats import Flusher, HeartbeatBuffer


def create_app(
    settings: ServerSettings | None = None,
    *,
    db: Database | None = None,
    clock: Callable[[], float] = time.time,
    key_cache_ttl_s: float = 5.0,
) -> FastAPI:
    settings = settings or ServerSettings()
    database = db or Database(settings.database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.migrate:
            migrate.upgrade(database)
        flusher = None
        if app.state.heartbeats is not None:
            flusher = Flusher(app.state.heartbeats, database, settings.heartbeat_flush_s)
            flusher.start()
        runner = None
        if settings.run_jobs:
            from control_plane.jobs.runner import JobRunner

            runner = JobRunner(database, settings=settings, clock=clock)
            runner.start()
        app.state.jobs = runner
        try:
            yield
        finally:
            if flusher is not None:
                flusher.stop()
            if runner is not None:
                runner.stop()
            if db is None:
                database.dispose()

    app = FastAPI(
        title="jitgpu control plane",
        version="1",
        description="Pre-warm GPUs just in time: holds, claims and allocations.",
        lifespan=lifespan,
        docs_url=None,  # served offline by docs.install
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.db = database
    app.state.clock = clock
    app.state.key_cache = KeyCache(ttl_s=key_cache_ttl_s)
    app.state.jobs = None
    app.state.heartbeats = HeartbeatBuffer() if settings.heartbeat_flush_s > 0 else None
    app.state.metrics, request_histogram = observability.make_registry(database)
    errors.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    # Added last, so it runs first: every request, refused ones too, gets an id and a line.
    app.add_middleware(observability.RequestObserver, histogram=request_histogram)
    # Matched in this order: the hot routes (allocations, holds, heartbeats) come first.
    for module in (allocations, holds, nodes, tenants, health, observability):
        app.include_router(module.router)
    docs.install(app)
    return app
