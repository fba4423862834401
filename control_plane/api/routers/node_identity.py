"""Node identity routes: enrolment tokens, enrolment, credential rotation, GPU moves."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Request

from control_plane.api.deps import (
    IdPath,
    admin,
    get_clock,
    get_db,
    no_idempotency_key,
    this_node,
)
from control_plane.api.errors import ERROR_RESPONSES
from control_plane.db.engine import Database
from control_plane.schemas.node_identity import (
    EnrolTokenCreate,
    EnrolTokenCreated,
    GpuMove,
    NodeCredential,
    NodeEnrol,
    NodeTokenInfo,
    RotationRequested,
)
from control_plane.schemas.nodes import Gpu
from control_plane.services import auth, gpu_owners, node_identity
from control_plane.services.auth import Principal

router = APIRouter(prefix="/v1", tags=["nodes"], responses=ERROR_RESPONSES)

GpuPath = Annotated[str, Path(min_length=1, max_length=96, pattern=r"^[A-Za-z0-9][\w.:-]*$")]


@router.post(
    "/node-tokens",
    status_code=201,
    response_model=EnrolTokenCreated,
    dependencies=[Depends(no_idempotency_key)],
)
def create_enrol_token(
    body: EnrolTokenCreate,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> EnrolTokenCreated:
    """An enrolment token for one node name: expiring, single-use unless asked otherwise."""
    return node_identity.create_enrol_token(db, body=body, now=clock())


@router.get("/node-tokens", response_model=list[NodeTokenInfo])
def list_node_tokens(
    db: Database = Depends(get_db), _: Principal = Depends(admin)
) -> list[NodeTokenInfo]:
    """Enrolment tokens and node credentials, without their secrets."""
    return node_identity.list_node_tokens(db)


@router.delete("/node-tokens/{token_id}", response_model=NodeTokenInfo)
def revoke_node_token(
    token_id: IdPath,
    request: Request,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> NodeTokenInfo:
    """Revoke an enrolment token, or a node credential (its node is drained)."""
    info = node_identity.revoke(db, token_id=token_id, now=clock())
    request.app.state.key_cache.clear()
    return info


@router.post(
    "/nodes/enrol",
    status_code=201,
    response_model=NodeCredential,
    dependencies=[Depends(no_idempotency_key)],
)
def enrol_node(
    body: NodeEnrol,
    request: Request,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    authorization: str | None = Header(default=None, include_in_schema=False),
) -> NodeCredential:
    """Trade an enrolment token (or the admin token) for the node's own credential."""
    token = auth.parse_bearer(authorization)
    credential = node_identity.enrol(
        db,
        token=token,
        admin_token=request.app.state.settings.admin_token,
        body=body,
        now=clock(),
    )
    request.app.state.key_cache.clear()
    return credential


@router.post(
    "/nodes/{node_id}/credentials",
    status_code=201,
    response_model=NodeCredential,
    dependencies=[Depends(no_idempotency_key)],
)
def rotate_credential(
    node_id: IdPath,
    request: Request,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(this_node),
) -> NodeCredential:
    """A new credential for the node (the node itself or an admin); the old one stops working."""
    credential = node_identity.rotate(db, node_id=node_id, now=clock())
    request.app.state.key_cache.clear()
    return credential


@router.post("/nodes/{node_id}/rotate", status_code=202, response_model=RotationRequested)
def request_rotation(
    node_id: IdPath,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> RotationRequested:
    """Ask the node's agent to rotate its credential at its next heartbeat."""
    return node_identity.request_rotation(db, node_id=node_id, now=clock())


@router.post("/gpus/{gpu_uuid}/move", response_model=Gpu)
def move_gpu(
    gpu_uuid: GpuPath,
    body: GpuMove,
    db: Database = Depends(get_db),
    clock=Depends(get_clock),
    _: Principal = Depends(admin),
) -> Gpu:
    """Give a GPU to another node; holds and allocations on it on the old node end."""
    return gpu_owners.move(db, uuid=gpu_uuid, node_id=body.node_id, now=clock())
