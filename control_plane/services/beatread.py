"""A node's common heartbeat read in one snapshot: the reads, folded into one statement that
the event loop sends on PostgreSQL (`db/loopreads.py`), and what their rows say. One statement
at a time on a worker thread they took about ten round trips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.db.loopreads import Read
from control_plane.schemas.enums import NodeStatus
from control_plane.schemas.nodes import Heartbeat, HeartbeatReply
from control_plane.services import sql
from control_plane.services.errors import NotFound
from control_plane.services.nodes import assemble_desired, health_changed, wanted_status


@dataclass(frozen=True)
class BeatRead:
    """What one heartbeat's read found: its key's row when asked for (None: no such key),
    whether the node exists, and the reply (None when the heartbeat changes the node's state,
    which is the write path's)."""

    key: dict[str, Any] | None
    found: bool
    reply: HeartbeatReply | None

    def answer(self, node_id: str) -> HeartbeatReply | None:
        """The reply (None: take the write path); 404 for an unknown node."""
        if not self.found:
            raise NotFound(f"node {node_id} not found")
        return self.reply


def reads(key_hash: str | None) -> list[Read]:
    """The reads of a common heartbeat (with `key_hash`, its key's too), for `interpret`, with
    the order their rows must keep; their parameters are `params`."""
    return _WITH_KEY if key_hash is not None else _WITHOUT_KEY


def params(node_id: str, key_hash: str | None) -> dict[str, Any]:
    return {"node": node_id} if key_hash is None else {"node": node_id, "hash": key_hash}


_WITHOUT_KEY: list[Read] = [
    (sql.NODE_STATE, None),
    (sql.NODE_GPU_HEALTH, None),
    (sql.NODE_ASSIGNMENTS, sql.NODE_ASSIGNMENTS_ORDER),
    (sql.NODE_HOLDS, None),
    (sql.NODE_ALLOCATIONS, None),
    (sql.READ_EPOCH, None),
]
_WITH_KEY: list[Read] = [*_WITHOUT_KEY, (sql.API_KEY_BY_HASH, None)]


def interpret(
    rows: list[list[Any]], *, node_id: str, body: Heartbeat, key_hash: str | None
) -> BeatRead:
    """What the rows of `reads` say, read in one snapshot: the key (with `key_hash`),
    whether the node exists, and the reply unless the heartbeat changes the node's state. The
    caller checks the key before using the rest (`BeatRead.answer`: 404 only after that)."""
    key = None
    if key_hash is not None and rows[-1]:
        key = dict(zip(_KEY_COLUMNS, rows[-1][0], strict=True))
    state, health, assignments, holds, allocs, epoch = rows[:6]
    if not state:
        return BeatRead(key=key, found=False, reply=None)
    status, drain_requested_at, rotate_requested_at = state[0]
    if wanted_status(status, drain_requested_at, body) is not None or health_changed(health, body):
        return BeatRead(key=key, found=True, reply=None)
    reply = HeartbeatReply(
        node_id=node_id,
        status=NodeStatus(status),
        assignments=assemble_desired(assignments, holds, allocs),
        epoch=epoch[0][0],
        rotate_credential=rotate_requested_at is not None,
    )
    return BeatRead(key=key, found=True, reply=reply)


_KEY_COLUMNS = [c.name for c in sql.API_KEY_BY_HASH.selected_columns]
