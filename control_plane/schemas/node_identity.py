"""Node identity on the wire: enrolment tokens, node credentials, rotation, GPU moves."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from control_plane.schemas.common import JsonInt, Label, Name, ObjectId, WireModel

MAX_ENROL_TTL_S = 30 * 86400


class EnrolTokenCreate(WireModel):
    node_name: Name = Field(description="The only node name this token can enrol.")
    ttl_s: JsonInt = Field(default=3600, ge=1, le=MAX_ENROL_TTL_S)
    single_use: bool = Field(strict=True, default=True)
    label: Label | None = None


class EnrolTokenCreated(BaseModel):
    id: str
    key: str = Field(description="The enrolment token (jge_...). Shown once; stored hashed.")
    prefix: str
    node_name: str
    single_use: bool
    label: str | None
    created_at: datetime
    expires_at: datetime


class NodeTokenInfo(BaseModel):
    """An enrolment token or a node credential, without its secret."""

    id: str
    kind: Literal["enrolment", "credential"]
    prefix: str
    node_name: str | None
    node_id: str | None
    label: str | None
    created_at: datetime
    expires_at: datetime | None = None
    used_at: datetime | None = None
    revoked_at: datetime | None


class NodeEnrol(WireModel):
    name: Name


class NodeCredential(BaseModel):
    node_id: str
    name: str
    credential_id: str
    credential: str = Field(description="The node credential (jgn_...). Shown once.")
    prefix: str
    created_at: datetime


class RotationRequested(BaseModel):
    node_id: str
    rotate_requested_at: datetime


class GpuMove(WireModel):
    node_id: ObjectId = Field(description="The node that owns the GPU from now on.")
