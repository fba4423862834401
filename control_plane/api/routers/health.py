"""Liveness and readiness probes, and the events feed."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from sqlalchemy import text

from control_plane.api.deps import get_db, tenant_or_admin
from control_plane.api.errors import ERROR_RESPONSES
from control_plane.db import migrate
from control_plane.db.engine import Database
from control_plane.schemas.common import PLAIN_PATTERN
from control_plane.schemas.events import Event
from control_plane.services import queries
from control_plane.services.auth import Principal

router = APIRouter()


@router.get("/healthz", tags=["health"])
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["health"], responses={503: {"description": "Not ready"}})
def readyz(db: Database = Depends(get_db)) -> JSONResponse:
    try:
        with db.read() as session:
            session.execute(text("SELECT 1"))
        revision = migrate.current_revision(db)
    except Exception as exc:  # any failure to reach the database means not ready
        return JSONResponse(
            {"status": "unavailable", "reason": exc.__class__.__name__}, status_code=503
        )
    head = migrate.head_revision()
    if revision != head:
        return JSONResponse(
            {"status": "migrating", "revision": revision, "head": head}, status_code=503
        )
    return JSONResponse({"status": "ready", "revision": revision})


@router.get("/v1/events", response_model=list[Event], tags=["events"], responses=ERROR_RESPONSES)
def list_events(
    after_id: int = Query(default=0, ge=0, le=2**62),
    object_id: str | None = Query(default=None, max_length=128, pattern=PLAIN_PATTERN),
    limit: int = Query(default=200, ge=1, le=1000),
    db: Database = Depends(get_db),
    who: Principal = Depends(tenant_or_admin),
) -> list[Event]:
    return queries.list_events(
        db, tenant_id=who.tenant_id, after_id=after_id, object_id=object_id, limit=limit
    )
