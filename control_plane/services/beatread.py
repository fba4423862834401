"""A node's common heartbeat read in one snapshot: the statements, sent by the event loop in
one round trip on PostgreSQL (`db/loopreads.py`), and what their rows say. One statement at a
time on a worker thread they took about ten round trips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def statements(node_id: str, key_hash: str | None) -> list[tuple[Any, dict | None]]:
    """The reads of a common heartbeat (with `key_hash`, its key's too), for `interpret`."""
    node = {"node": node_id}
    found: list[tuple[Any, dict | None]] = [
        (sql.NODE_STATE, node),
        (sql.NODE_GPU_HEALTH, node),
        (sql.NODE_ASSIGNMENTS, node),
        (sql.NODE_HOLDS, node),
        (sql.NODE_ALLOCATIONS, node),
        (sql.READ_EPOCH, None),
    ]
    if key_hash is not None:
        found.append((sql.API_KEY_BY_HASH, {"hash": key_hash}))
    return found


def interpret(
    rows: list[list[Any]], *, node_id: str, body: Heartbeat, key_hash: str | None
) -> BeatRead:
    """What the rows of `statements` say, read in one snapshot: the key (with `key_hash`),
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
