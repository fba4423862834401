"""A node's common heartbeat read in one snapshot: on PostgreSQL in one round trip, where its
reads one statement at a time took about ten (each with its share of the server's core)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.db.engine import Database
from control_plane.schemas.enums import NodeStatus
from control_plane.schemas.nodes import Heartbeat, HeartbeatReply
from control_plane.services import sql
from control_plane.services.errors import NotFound
from control_plane.services.nodes import assemble_desired, wanted_status


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


def read(db: Database, *, node_id: str, body: Heartbeat, key_hash: str | None) -> BeatRead:
    """Everything a heartbeat that changes nothing but telemetry needs, read at once: the key
    (with `key_hash`, for a stale cache entry), the node's state and GPUs' health, its desired
    state and the epoch. The caller checks the key before using the rest; 404 for an unknown
    node only after that check."""
    node = {"node": node_id}
    statements: list[tuple[Any, dict | None]] = [
        (sql.NODE_STATE, node),
        (sql.NODE_GPU_HEALTH, node),
        (sql.NODE_ASSIGNMENTS, node),
        (sql.NODE_HOLDS, node),
        (sql.NODE_ALLOCATIONS, node),
        (sql.READ_EPOCH, None),
    ]
    if key_hash is not None:
        statements.append((sql.API_KEY_BY_HASH, {"hash": key_hash}))
    rows = sql.read_once(db, statements)
    key = None
    if key_hash is not None and rows[-1]:
        key = dict(zip(_KEY_COLUMNS, rows[-1][0], strict=True))
    state, health, assignments, holds, allocs, epoch = rows[:6]
    if not state:
        return BeatRead(key=key, found=False, reply=None)
    status, drain_requested_at, rotate_requested_at = state[0]
    changes = wanted_status(status, drain_requested_at, body) is not None
    if not changes and body.gpus:
        healthy = dict(health)
        changes = any(g.uuid in healthy and healthy[g.uuid] != g.healthy for g in body.gpus)
    if changes:
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
