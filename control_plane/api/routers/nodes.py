"""Node routes: registration, heartbeats, warm-up and task reports (node token), and listings."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from control_plane.api.deps import IdPath, admin, get_clock, get_db, node_or_admin, this_node
from control_plane.api.errors import ERROR_RESPONSES
from control_plane.api.respond import model_json, read, written
from control_plane.db.engine import Database
from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.backends import BackendEvent, BackendEventReply
from control_plane.schemas.nodes import (
    Gpu,
    Heartbeat,
    HeartbeatReply,
    Node,
    NodeRegister,
    NodeWork,
    TaskReport,
    WarmupReport,
)
from control_plane.services import backend_events, holds, nodes, tasks
from control_plane.services.auth import Principal

router = APIRouter(prefix="/v1", tags=["nodes"], responses=ERROR_RESPONSES)


@router.post("/nodes", status_code=201, response_model=Node)
def register_node(
    body: NodeRegister,
    request: Request,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    who: Principal = Depends(node_or_admin),
) -> Node:
    node = nodes.register(db, body=body, now=clock(), as_node=who.node_id)
    node.heartbeat_port = request.app.state.settings.heartbeat_port
    return node


@router.post("/nodes/{node_id}/heartbeat", response_model=HeartbeatReply)
def heartbeat(
    node_id: IdPath,
    request: Request,
    body: Heartbeat | None = None,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(this_node),
) -> Response:
    # Serialised by pydantic at once: FastAPI's check of a returned model against the route's
    # response_model cost more than the common heartbeat's own reads.
    return model_json(
        nodes.heartbeat(
            db,
            request.app.state.writer,
            node_id=node_id,
            body=body or Heartbeat(),
            now=clock(),
            buffer=request.app.state.heartbeats,
        )
    )


@router.get("/nodes/{node_id}/work", response_model=NodeWork)
async def node_work(
    node_id: IdPath,
    request: Request,
    since: str | None = Query(
        default=None, max_length=64, description="`version` of the node's last answer."
    ),
    wait: float = Query(default=0.0, ge=0, le=60, description="Seconds to wait for a change."),
    db: Database = Depends(get_db),
    _: Principal = Depends(this_node),
) -> Response:
    """The node's desired state, as in a heartbeat reply; with `since`, once it differs from
    that version (or after `wait` seconds): a long poll that hands a node new work at once."""
    board = request.app.state.node_work
    if since is not None:
        await board.wait(node_id, since, wait)
    # The version before the read: a change committed meanwhile shows in a later version too.
    version = board.version(node_id)
    reply = await read(db, lambda session: nodes.work_in(session, node_id=node_id))
    return model_json(
        NodeWork(
            node_id=reply.node_id,
            status=reply.status,
            assignments=reply.assignments,
            epoch=reply.epoch,
            version=version,
        )
    )


@router.post("/nodes/{node_id}/holds/{hold_id}/warmup", response_model=Hold)
async def report_warmup(
    node_id: IdPath,
    hold_id: IdPath,
    body: WarmupReport,
    request: Request,
    _: Principal = Depends(this_node),
) -> Response:
    return await written(
        request,
        lambda session, now: holds.report_warmup(
            session, node_id=node_id, hold_id=hold_id, body=body, now=now
        ),
    )


@router.post("/nodes/{node_id}/holds/{hold_id}/backend-event", response_model=BackendEventReply)
async def report_backend_event(
    node_id: IdPath,
    hold_id: IdPath,
    body: BackendEvent,
    request: Request,
    _: Principal = Depends(this_node),
) -> Response:
    """A scheduler backend (Slurm) saw the hold claimed by a job, or lost it."""
    return await written(
        request,
        lambda session, now: backend_events.report(
            session, node_id=node_id, hold_id=hold_id, body=body, now=now
        ),
    )


@router.post("/nodes/{node_id}/allocations/{allocation_id}/task", response_model=Allocation)
async def report_task(
    node_id: IdPath,
    allocation_id: IdPath,
    body: TaskReport,
    request: Request,
    _: Principal = Depends(this_node),
) -> Response:
    # A command of the group-commit writer: an exit releases the GPUs and places what waits
    # in the same commit as other requests' (two reports per job, the busiest node route).
    return await written(
        request,
        lambda session, now: tasks.report(
            session, node_id=node_id, allocation_id=allocation_id, body=body, now=now
        ),
    )


@router.post("/nodes/{node_id}/allocations/{allocation_id}/warmup", response_model=Allocation)
async def report_allocation_warmup(
    node_id: IdPath,
    allocation_id: IdPath,
    body: WarmupReport,
    request: Request,
    _: Principal = Depends(this_node),
) -> Response:
    return await written(
        request,
        lambda session, now: tasks.report_warmup(
            session, node_id=node_id, allocation_id=allocation_id, body=body, now=now
        ),
    )


@router.post("/nodes/{node_id}/drain", response_model=Node)
def drain_node(
    node_id: IdPath,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> Node:
    """Nothing new is placed on the node; its holds and allocations go on. Idempotent."""
    return nodes.set_drain(db, node_id=node_id, drain=True, now=clock())


@router.post("/nodes/{node_id}/undrain", response_model=Node)
def undrain_node(
    node_id: IdPath,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> Node:
    return nodes.set_drain(db, node_id=node_id, drain=False, now=clock())


@router.get("/nodes", response_model=list[Node])
def list_nodes(db: Database = Depends(get_db), _: Principal = Depends(admin)) -> list[Node]:
    return nodes.list_nodes(db)


@router.get("/nodes/{node_id}", response_model=Node)
def get_node(
    node_id: IdPath, db: Database = Depends(get_db), _: Principal = Depends(this_node)
) -> Node:
    return nodes.get_node(db, node_id=node_id)


@router.get("/gpus", response_model=list[Gpu])
def list_gpus(db: Database = Depends(get_db), _: Principal = Depends(admin)) -> list[Gpu]:
    return nodes.list_gpus(db)
