"""Node agents: registration, heartbeats (telemetry only) and the desired state they pull."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from control_plane.db.engine import Database
from control_plane.db.models import (
    AssignmentRow,
    GpuRow,
    NodeRow,
)
from control_plane.schemas.common import utc_from_epoch
from control_plane.schemas.enums import NodeStatus
from control_plane.schemas.nodes import (
    Gpu,
    Heartbeat,
    HeartbeatReply,
    Node,
    NodeAssignment,
    NodeRegister,
)
from control_plane.services import evacuate, gpu_owners, lifecycle, placing, revive, sql
from control_plane.services.errors import Conflict, Forbidden, NotFound
from control_plane.services.events import record
from control_plane.services.heartbeats import HeartbeatBuffer
from control_plane.services.ids import new_id
from control_plane.services.writer import GroupWriter

ADMIN_DRAIN = "drained by an administrator"


def _node_or_404(session: Session, node_id: str) -> NodeRow:
    node = session.get(NodeRow, node_id)
    if node is None:
        raise NotFound(f"node {node_id} not found")
    return node


def new_node(
    session: Session, *, name: str, spine: str, leaf: str, now: float, why: str
) -> NodeRow:
    """A node row, registering until its agent reports GPUs, with its first event."""
    node = NodeRow(
        id=new_id("node"),
        name=name,
        spine=spine,
        leaf=leaf,
        status=NodeStatus.REGISTERING.value,
        registered_at=now,
    )
    session.add(node)
    record(session, kind="node", object_id=node.id, to_state=node.status, at=now, reason=why)
    return node


def register(db: Database, *, body: NodeRegister, now: float, as_node: str | None = None) -> Node:
    """Create the node, or update it in place when its name is known (GPUs never duplicate).

    `as_node` is the node a node credential is bound to: it may update that node only.
    """
    uuids = [g.uuid for g in body.gpus]
    if len(set(uuids)) != len(uuids):
        raise Conflict(
            "the same GPU uuid appears twice in gpus", code="duplicate_gpu", field="gpus"
        )
    with db.write(placement=True) as session:
        node = session.exec(select(NodeRow).where(NodeRow.name == body.name)).first()
        if as_node is not None and (node is None or node.id != as_node):
            raise Forbidden(
                f"this credential belongs to node {as_node}; it cannot register {body.name!r}",
                code="wrong_node",
                field="name",
            )
        if node is None:
            node = new_node(
                session, name=body.name, spine=body.spine, leaf=body.leaf, now=now, why="registered"
            )
        gpu_owners.check_free(session, node=node, uuids=uuids)
        node.spine, node.leaf = body.spine, body.leaf
        node.agent_version = body.agent_version
        node.last_heartbeat_at = now
        session.flush()
        _sync_gpus(session, node, body, now)
        drained = node.drain_requested_at is not None
        wanted = NodeStatus.DRAINING if drained else NodeStatus.ONLINE
        if node.status != wanted.value:
            reason = ADMIN_DRAIN if drained else "registration"
            _move(session, node, wanted, now=now, reason=reason, back_by="registration")
        session.flush()
        return _node_views(session, [node])[0]


def set_drain(db: Database, *, node_id: str, drain: bool, now: float) -> Node:
    """An administrator drains a node (nothing new is placed on it; what runs there goes on)
    or undrains it. Idempotent; a node that is offline takes the state when it comes back."""
    with db.write(placement=True) as session:
        node = _node_or_404(session, node_id)
        drain_in(session, node, drain=drain, now=now)
        session.flush()
        return _node_views(session, [node])[0]


def drain_in(
    session: Session, node: NodeRow, *, drain: bool, now: float, reason: str = ADMIN_DRAIN
) -> None:
    """`set_drain` inside a caller's transaction (revoking a node's credential drains it)."""
    if drain:
        if node.drain_requested_at is None:
            node.drain_requested_at = now
        if node.status == NodeStatus.ONLINE.value:
            _move(session, node, NodeStatus.DRAINING, now=now, reason=reason)
    else:
        node.drain_requested_at = None
        if node.status == NodeStatus.DRAINING.value:
            _move(session, node, NodeStatus.ONLINE, now=now, reason="undrained by an administrator")


def _move(
    session: Session,
    node: NodeRow,
    status: NodeStatus,
    *,
    now: float,
    reason: str,
    back_by: str = "heartbeat",
) -> None:
    """Move the node to `status`; `back_by` says what brought an offline node back."""
    if status == NodeStatus.DRAINING and node.status != NodeStatus.ONLINE.value:
        # Only an online node starts draining: a drained node that comes back from offline
        # (or registers again) is online for a moment, which the events show.
        lifecycle.move_node(session, node, NodeStatus.ONLINE, now=now, reason=back_by)
    lifecycle.move_node(session, node, status, now=now, reason=reason)


def _sync_gpus(session: Session, node: NodeRow, body: NodeRegister, now: float) -> None:
    placing.mark_changed(session, inventory=True)
    existing = {
        g.uuid: g
        for g in session.exec(
            select(GpuRow).where(col(GpuRow.uuid).in_([g.uuid for g in body.gpus]))
        ).all()
    }
    for spec in body.gpus:
        gpu = existing.get(spec.uuid)
        if gpu is None:
            session.add(
                GpuRow(
                    uuid=spec.uuid,
                    node_id=node.id,
                    index=spec.index,
                    model=spec.model,
                    memory_mb=spec.memory_mb,
                )
            )
            continue
        if gpu.node_id != node.id:
            # The GPU moved hosts: whatever it held on the old node is gone.
            lifecycle.fail_gpu_owners(
                session, [gpu.uuid], now=now, reason=f"GPU moved to node {node.name}"
            )
        gpu.node_id, gpu.index, gpu.model = node.id, spec.index, spec.model
        gpu.memory_mb, gpu.present = spec.memory_mb, True
    gone = session.exec(
        select(GpuRow).where(
            GpuRow.node_id == node.id,
            col(GpuRow.present).is_(True),
            col(GpuRow.uuid).not_in([g.uuid for g in body.gpus]),
        )
    ).all()
    for gpu in gone:
        gpu.present = False
    if gone:
        lifecycle.fail_gpu_owners(
            session, [g.uuid for g in gone], now=now, reason="GPU no longer reported by its node"
        )


def heartbeat(
    db: Database,
    writer: GroupWriter,
    *,
    node_id: str,
    body: Heartbeat,
    now: float,
    buffer: HeartbeatBuffer | None = None,
) -> HeartbeatReply:
    """Store telemetry and health; never take assignment state from the agent. Reply with
    the desired state.

    The one assignment change a heartbeat causes is the server's own decision: a GPU reported
    unhealthy takes its holds with it (re-placed or failed, as when a node dies).

    The common heartbeat (nothing changed but the telemetry) only reads and leaves the write
    to `buffer`, which many heartbeats share; a state change is written at once, as a command
    of the writer (the caller is a worker thread).
    """
    with db.read(snapshot=True) as session:
        if buffer is not None:
            reply = unchanged_heartbeat(session, node_id=node_id, body=body, now=now, buffer=buffer)
            if reply is not None:
                return reply
            changes = True
        else:
            changes = _changes(session, node_id, body)[1]

    def write(session: Session) -> None:
        node = _node_or_404(session, node_id)
        node.last_heartbeat_at = now
        node.telemetry_json = telemetry_json(body)
        if changes:
            _apply_changes(session, node, body, now)

    writer.run_from_thread(write)
    # Read after the commit, so that the reply's epoch is that of the state it shows.
    return work(db, node_id=node_id)


def unchanged_heartbeat(
    session: Session, *, node_id: str, body: Heartbeat, now: float, buffer: HeartbeatBuffer
) -> HeartbeatReply | None:
    """The common heartbeat, in a read transaction: if it changes nothing but telemetry, put
    that in `buffer` and return the reply; else None (`heartbeat` writes it at once)."""
    (status, _, rotate_requested_at), changes = _changes(session, node_id, body)
    if changes:
        return None
    reply = _reply(session, node_id, status, rotate_requested_at)
    buffer.put(node_id, now, telemetry_json(body))
    return reply


def _changes(session: Session, node_id: str, body: Heartbeat) -> tuple[tuple, bool]:
    """The node's status, drain and rotation requests, and whether the heartbeat changes its
    status or a GPU's health."""
    # Prebuilt statements on the DB-API cursor, not ORM loads: this runs for every node
    # every few seconds.
    state = sql.run(session, sql.NODE_STATE, {"node": node_id}).fetchone()
    if state is None:
        raise NotFound(f"node {node_id} not found")
    if wanted_status(state[0], state[1], body) is not None:
        return tuple(state), True
    if body.gpus:
        health = sql.run(session, sql.NODE_GPU_HEALTH, {"node": node_id}).fetchall()
        if health_changed(health, body):
            return tuple(state), True
    return tuple(state), False


def health_changed(health: Sequence[Any], body: Heartbeat) -> bool:
    """Whether the heartbeat reports a known GPU's health other than stored (NODE_GPU_HEALTH
    rows: uuid, healthy)."""
    stored = dict(health)
    return any(g.uuid in stored and stored[g.uuid] != g.healthy for g in body.gpus)


def work(db: Database, *, node_id: str) -> HeartbeatReply:
    """The node's desired state now, with the cluster epoch it is as of."""
    with db.read(snapshot=True) as session:
        return work_in(session, node_id=node_id)


def work_in(session: Session, *, node_id: str) -> HeartbeatReply:
    """`work`, in a read transaction the caller holds (one snapshot)."""
    state = sql.run(session, sql.NODE_STATE, {"node": node_id}).fetchone()
    if state is None:
        raise NotFound(f"node {node_id} not found")
    return _reply(session, node_id, state[0], state[2])


def _reply(
    session: Session, node_id: str, status: str, rotate_requested_at: float | None
) -> HeartbeatReply:
    # One snapshot: the epoch and the assignments agree, so that a node can drop a reply
    # older than one it applied (a heartbeat and a long poll may cross).
    return HeartbeatReply(
        node_id=node_id,
        status=NodeStatus(status),
        assignments=desired_state(session, node_id),
        epoch=sql.run(session, sql.READ_EPOCH).fetchone()[0],
        rotate_credential=rotate_requested_at is not None,
    )


# What a node's telemetry keeps of a heartbeat: each GPU's readings (health is stored apart).
_TELEMETRY = {"draining": True, "gpus": {"__all__": {"healthy", "reason"}}}


def telemetry_json(body: Heartbeat) -> str:
    """The stored form: `{"gpus": [{"uuid": ..., readings}], "host": {...}}`, serialised by
    pydantic at once (a dict by uuid through json.dumps cost three times as much, on a path
    every node takes every few seconds)."""
    return body.model_dump_json(exclude=_TELEMETRY, exclude_none=True)


def _gpu_telemetry(stored: dict) -> dict[str, dict]:
    """Readings by GPU uuid, from either stored form (rows written before this one keep a
    dict by uuid)."""
    gpus = stored.get("gpus", {})
    if isinstance(gpus, dict):
        return gpus
    return {g["uuid"]: {k: v for k, v in g.items() if k != "uuid"} for g in gpus}


def wanted_status(
    status: str, drain_requested_at: float | None, body: Heartbeat
) -> NodeStatus | None:
    """The status a heartbeat proves (None: the node has it already): draining while its
    agent or an administrator drains it, else online."""
    drained = body.draining or drain_requested_at is not None
    wanted = NodeStatus.DRAINING if drained else NodeStatus.ONLINE
    return None if status == wanted.value else wanted


def _apply_changes(session: Session, node: NodeRow, body: Heartbeat, now: float) -> None:
    reported = {g.uuid: g for g in body.gpus}
    sick: dict[str, str] = {}
    for gpu in session.exec(select(GpuRow).where(GpuRow.node_id == node.id)).all():
        report = reported.get(gpu.uuid)
        if report is not None and report.healthy != gpu.healthy:
            placing.mark_changed(session, inventory=True)
            gpu.healthy = report.healthy
            gpu.health_reason = None if report.healthy else (report.reason or "unhealthy")
            record(
                session,
                kind="gpu",
                object_id=gpu.uuid,
                at=now,
                to_state="healthy" if report.healthy else "unhealthy",
                reason=gpu.health_reason,
            )
            if not report.healthy:
                sick[gpu.uuid] = gpu.health_reason or "unhealthy"
    # A hold must not be claimed onto a broken GPU: it moves (or fails) like a dead node's.
    evacuate.unhealthy_gpus(session, sick, now=now)
    wanted = wanted_status(node.status, node.drain_requested_at, body)
    if wanted is not None:
        was_offline = node.status == NodeStatus.OFFLINE.value
        if wanted != NodeStatus.DRAINING:
            reason = "heartbeat"
        else:
            reason = "agent drain" if body.draining else ADMIN_DRAIN
        _move(session, node, wanted, now=now, reason=reason)
        if was_offline:
            # Back within the lease: its jobs get their GPUs back, not a kill.
            revive.returning_node(session, node, now=now)


def desired_state(session: Session, node_id: str) -> list[NodeAssignment]:
    """What the node must keep: active holds to warm/keep, allocations (and their commands)."""
    rows = sql.run(session, sql.NODE_ASSIGNMENTS, {"node": node_id}).fetchall()
    # Prebuilt statements by node, not ORM loads by id: a busy node reads these with every
    # heartbeat and every work poll.
    holds = allocs = []
    if any(hold_id and not allocation_id for _, hold_id, allocation_id in rows):
        holds = sql.run(session, sql.NODE_HOLDS, {"node": node_id}).fetchall()
    if any(allocation_id for *_, allocation_id in rows):
        allocs = sql.run(session, sql.NODE_ALLOCATIONS, {"node": node_id}).fetchall()
    return assemble_desired(rows, holds, allocs)


def assemble_desired(
    assignments: Sequence[Any], hold_rows: Sequence[Any], alloc_rows: Sequence[Any]
) -> list[NodeAssignment]:
    """The desired state from the rows of NODE_ASSIGNMENTS, NODE_HOLDS and NODE_ALLOCATIONS,
    in the order the GPUs were assigned."""
    by_alloc: dict[str, list[str]] = defaultdict(list)
    by_hold: dict[str, list[str]] = defaultdict(list)
    for uuid, hold_id, allocation_id in assignments:
        if allocation_id:
            by_alloc[allocation_id].append(uuid)
        elif hold_id:
            by_hold[hold_id].append(uuid)
    holds = {r[0]: r for r in hold_rows}
    allocs = {r[0]: r for r in alloc_rows}
    out: list[NodeAssignment] = []
    for hold_id, uuids in by_hold.items():
        _, status, warmup, expires_at, start_at, tenant_name = holds[hold_id]
        out.append(
            NodeAssignment(
                kind="hold",
                id=hold_id,
                status=status,
                gpu_uuids=uuids,
                warmup=warmup,
                expires_at=utc_from_epoch(expires_at),
                start_at=utc_from_epoch(start_at),
                tenant=tenant_name,
            )
        )
    for alloc_id, uuids in by_alloc.items():
        _, status, command_json, task_status, warmup, ready_at, expires_at, hold_id = allocs[
            alloc_id
        ]
        out.append(
            NodeAssignment(
                kind="allocation",
                id=alloc_id,
                status=status,
                gpu_uuids=uuids,
                command=json.loads(command_json) if command_json else None,
                task_status=task_status,
                # Warm only what is not usable yet; a ready allocation needs nothing.
                warmup=warmup if ready_at is None else None,
                expires_at=utc_from_epoch(expires_at),
                hold_id=hold_id,
            )
        )
    return out


def _node_views(session: Session, nodes: list[NodeRow]) -> list[Node]:
    if not nodes:
        return []
    ids = [n.id for n in nodes]
    gpus = session.exec(
        select(GpuRow)
        .where(col(GpuRow.node_id).in_(ids), col(GpuRow.present).is_(True))
        .order_by(col(GpuRow.node_id), col(GpuRow.index), col(GpuRow.uuid))
    ).all()
    owners = _owners(session, [g.uuid for g in gpus])
    by_node: dict[str, list[GpuRow]] = defaultdict(list)
    for gpu in gpus:
        by_node[gpu.node_id].append(gpu)
    out = []
    for node in nodes:
        telemetry = json.loads(node.telemetry_json) if node.telemetry_json else {}
        gpu_tel = _gpu_telemetry(telemetry)
        out.append(
            Node(
                id=node.id,
                name=node.name,
                spine=node.spine,
                leaf=node.leaf,
                status=NodeStatus(node.status),
                registered_at=utc_from_epoch(node.registered_at),
                last_heartbeat_at=utc_from_epoch(node.last_heartbeat_at),
                host=telemetry.get("host", {}),
                gpus=[
                    _gpu_view(g, node, owners.get(g.uuid), gpu_tel.get(g.uuid, {}))
                    for g in by_node[node.id]
                ],
            )
        )
    return out


def _owners(session: Session, uuids: list[str]) -> dict[str, str]:
    if not uuids:
        return {}
    rows = session.exec(
        select(AssignmentRow.gpu_uuid, AssignmentRow.hold_id, AssignmentRow.allocation_id).where(
            col(AssignmentRow.ended_at).is_(None), col(AssignmentRow.gpu_uuid).in_(uuids)
        )
    ).all()
    return {uuid: (alloc or hold) for uuid, hold, alloc in rows}


def _gpu_view(gpu: GpuRow, node: NodeRow, owner: str | None, telemetry: dict) -> Gpu:
    return Gpu(
        uuid=gpu.uuid,
        node_id=node.id,
        node=node.name,
        index=gpu.index,
        model=gpu.model,
        memory_mb=gpu.memory_mb,
        healthy=gpu.healthy,
        assigned_to=owner,
        telemetry=telemetry,
    )


def list_nodes(db: Database) -> list[Node]:
    with db.read() as session:
        nodes = list(session.exec(select(NodeRow).order_by(col(NodeRow.name))).all())
        return _node_views(session, nodes)


def get_node(db: Database, *, node_id: str) -> Node:
    with db.read() as session:
        return _node_views(session, [_node_or_404(session, node_id)])[0]


def list_gpus(db: Database) -> list[Gpu]:
    return [gpu for node in list_nodes(db) for gpu in node.gpus]
