"""A node's ordinary heartbeat served below the framework, in one trip to the thread pool.

1,250 nodes at the default 5 s interval send 250 heartbeats a second, each with a node's full
telemetry. Through FastAPI one cost about 2.5 ms of the server's one busy core (dependency
solving, body validation by the framework, a thread hop for the key lookup and another for the
route), which left allocations 80% slower while heartbeats flowed. Here the body is validated
by pydantic straight from bytes, and the key check and the heartbeat's reads share one thread
hop.

A node's key is used once per heartbeat interval, about as often as the key cache forgets it.
So a cached key past its freshness is not dropped but checked again in the database, in the
same worker thread as the heartbeat, before the heartbeat does anything: a revoked key is
refused within the cache's TTL as before. Anything else unusual (no key in the cache, another
node's key, a body that fails validation, a refused key) goes to the framework's route with
the body replayed, which answers as it always did.

On PostgreSQL the common heartbeat's reads, a stale key's second look among them, are one
statement (`services/beatread.py`) on the event loop's own async connections
(`db/loopreads.py`): one statement at a time on a worker thread they took about ten round
trips, and at 1,250 nodes cost the allocations two thirds of their rate (BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State
from starlette.types import Receive, Scope, Send

from control_plane.api.asgisteps import (
    Decline,
    answer,
    answer_error,
    bearer,
    headers_of,
    json_bytes,
    read_body,
    replay,
)
from control_plane.db.engine import ReadWouldWait
from control_plane.schemas.enums import Scope as KeyScope
from control_plane.schemas.nodes import Heartbeat
from control_plane.services import auth, beatread, nodes
from control_plane.services.auth import Principal
from control_plane.services.errors import Unauthenticated

if TYPE_CHECKING:
    from control_plane.api.hotroutes import HotRoutes

HEARTBEAT = "/v1/nodes/{node_id}/heartbeat"


async def heartbeat(
    routes: HotRoutes, scope: Scope, receive: Receive, send: Send, node_id: str
) -> None:
    messages, body = await read_body(receive, routes.max_body_bytes)
    state = scope["app"].state
    try:
        headers = headers_of(scope)
        token = bearer(headers)
        cached = state.key_cache.lookup(token)
        if cached is None:
            raise Decline
        who, fresh = cached
        _may_beat(who, node_id)
        # From bytes: pydantic's own JSON parser, no dict built in between.
        report = Heartbeat.model_validate_json(json_bytes(headers, body))
    except (Decline, ValidationError):
        await routes.decline(HEARTBEAT, scope, replay(messages, receive), send)
        return
    try:
        if state.rate_limiter is not None:
            state.rate_limiter.charge(who)
        recheck = None if fresh else who
        text: str | _NotServed = _ON_A_THREAD
        if state.db.loop_reads and state.heartbeats is not None:
            with contextlib.suppress(ReadWouldWait):
                text = _on_loop(state, token, recheck, node_id, report)
                recheck = None  # checked on the loop (or refused: no second look)
        if (
            text is _ON_A_THREAD
            and state.loop_reader is not None
            and state.loop_reader.serves_here()
            and state.heartbeats is not None
            and (recheck is None or recheck.scope != KeyScope.ADMIN)
        ):
            text = await _at_once(state, token, recheck, node_id, report)
            recheck = None  # checked in the same read (or refused: no second look)
        if text is _ON_A_THREAD:  # a state change, or the file was busy
            text = await run_in_threadpool(_beat, state, token, recheck, node_id, report)
    except Exception as exc:  # mapped exactly as the framework's handlers map it
        routes.serving(scope, HEARTBEAT)
        await answer_error(scope, send, exc)
        return
    if not isinstance(text, str):  # the key was refused on its second look: the route says so
        state.key_cache.forget(token)
        await routes.decline(HEARTBEAT, scope, replay(messages, receive), send)
        return
    routes.serving(scope, HEARTBEAT)
    await answer(scope, send, 200, text.encode())


class _NotServed:
    """Why a step did not answer: the key did not hold on its second look (`_REFUSED`), or
    the heartbeat changes state, which takes the write lock (`_ON_A_THREAD`)."""


_REFUSED = _NotServed()
_ON_A_THREAD = _NotServed()


def _may_beat(who: Principal, node_id: str) -> None:
    """A node's own credential, or the admin's; anything else is the route's to refuse."""
    if who.scope == KeyScope.ADMIN:
        return
    if who.scope != KeyScope.NODE or who.node_id != node_id:
        raise Decline


def _key_holds(session: Session, state: State, token: str, cached: Principal) -> bool:
    """A stale cache entry checked again: the key still resolves to the same principal."""
    try:
        found = auth.authenticate(session, token=token, admin_token=state.settings.admin_token)
    except Unauthenticated:
        return False
    return _same(state, token, cached, found)


def _same(state: State, token: str, cached: Principal, found: Principal) -> bool:
    if found != cached:
        return False
    state.key_cache.put(token, found)
    return True


def _on_loop(
    state: State, token: str, recheck: Principal | None, node_id: str, report: Heartbeat
) -> str | _NotServed:
    """The common heartbeat read on the event loop's thread (a local database only);
    `_ON_A_THREAD` when it changes state, which takes the write lock."""
    # Prebuilt statements only: the raw read skips SQLAlchemy's transaction machinery.
    with state.db.loop_read_raw() as session:
        if recheck is not None and not _key_holds(session, state, token, recheck):
            return _REFUSED
        reply = nodes.unchanged_heartbeat(
            session, node_id=node_id, body=report, now=state.clock(), buffer=state.heartbeats
        )
    return _ON_A_THREAD if reply is None else reply.model_dump_json()


async def _at_once(
    state: State, token: str, recheck: Principal | None, node_id: str, report: Heartbeat
) -> str | _NotServed:
    """PostgreSQL: the common heartbeat's reads on the loop's own connections, in one round
    trip, a stale key's second look included (`beatread`)."""
    key_hash = None if recheck is None else auth.hash_key(token)
    reads = beatread.reads(key_hash)
    rows = await state.loop_reader.read_once(reads, beatread.params(node_id, key_hash))
    found = beatread.interpret(rows, node_id=node_id, body=report, key_hash=key_hash)
    if recheck is not None and not _row_holds(state, token, recheck, found.key):
        return _REFUSED
    reply = found.answer(node_id)  # 404 for an unknown node, only once the key held
    if reply is None:
        return _ON_A_THREAD  # a state change: the write path's
    state.heartbeats.put(node_id, state.clock(), nodes.telemetry_json(report))
    return reply.model_dump_json()


def _row_holds(state: State, token: str, cached: Principal, row: dict[str, Any] | None) -> bool:
    """`_key_holds` from the key's row, read already."""
    try:
        found = auth.principal_of(row)
    except Unauthenticated:
        return False
    return _same(state, token, cached, found)


def _beat(
    state: State, token: str, recheck: Principal | None, node_id: str, report: Heartbeat
) -> str | _NotServed:
    """In a worker thread: check a stale key again, then the heartbeat."""
    if recheck is not None:
        with state.db.read() as session:
            if not _key_holds(session, state, token, recheck):
                return _REFUSED
    reply = nodes.heartbeat(
        state.db,
        state.writer,
        node_id=node_id,
        body=report,
        now=state.clock(),
        buffer=state.heartbeats,
    )
    return reply.model_dump_json()
