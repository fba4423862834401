"""Writes through the group-commit writer (idempotent with a key); short reads where cheapest."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from control_plane.db.engine import Database, ReadWouldWait
from control_plane.services import idempotency
from control_plane.services.auth import Principal

T = TypeVar("T")


async def created(
    request: Request,
    *,
    who: Principal,
    key: str | None,
    body: BaseModel,
    use_case: Callable[[Session, float], tuple[int, BaseModel]],
) -> Response:
    status, text = await request.app.state.writer.call(
        owner=who.idempotency_owner,
        key=key,
        fingerprint=lambda: idempotency.request_hash(request.method, request.url.path, body),
        use_case=use_case,
    )
    return json_text(text, status)


async def written(request: Request, use_case: Callable[[Session, float], BaseModel]) -> Response:
    """Run a write use case that takes no Idempotency-Key through the group-commit writer;
    answer 200 with its model once committed."""
    status, text = await request.app.state.writer.call(
        use_case=lambda session, now: (200, use_case(session, now))
    )
    return json_text(text, status)


async def read(db: Database, use_case: Callable[[Session], T]) -> T:
    """Run a short read: on the event loop's thread where the database allows it (a local
    SQLite file: the hop to a worker thread costs more than the read), else, or if the file
    is busy, in a worker thread with a snapshot transaction."""
    if db.loop_reads:
        try:
            with db.loop_read() as session:
                return use_case(session)
        except ReadWouldWait:
            pass

    def on_a_thread() -> T:
        with db.read(snapshot=True) as session:
            return use_case(session)

    return await run_in_threadpool(on_a_thread)


def json_text(text: str, status: int = 200) -> Response:
    """An answer already serialised (by pydantic): no second pass through a JSON encoder."""
    return Response(text, status_code=status, media_type="application/json")


def model_json(model: BaseModel, status: int = 200) -> Response:
    """A model as JSON by pydantic's serializer directly, skipping FastAPI's re-validation of
    a returned model (the route's response_model still documents it)."""
    return json_text(model.model_dump_json(), status)
