"""Which node owns a GPU: a live node's GPU is never taken by another node's registration."""

from __future__ import annotations

from sqlmodel import Session, col, select

from control_plane.db.engine import Database
from control_plane.db.models import GpuRow, NodeRow
from control_plane.schemas.enums import NodeStatus
from control_plane.schemas.nodes import Gpu
from control_plane.services import lifecycle, placing
from control_plane.services.errors import Conflict, NotFound
from control_plane.services.events import record


class GpuOwned(Conflict):
    code = "gpu_owned"


def check_free(session: Session, *, node: NodeRow, uuids: list[str]) -> None:
    """Refuse (409) a registration that lists a GPU another live node still reports.

    A GPU may change hosts on its own only when its old node is offline or stopped
    reporting it; otherwise an administrator moves it (`move`).
    """
    if not uuids:
        return
    rows = session.exec(
        select(GpuRow.uuid, NodeRow.name)
        .join(NodeRow, col(NodeRow.id) == col(GpuRow.node_id))
        .where(
            col(GpuRow.uuid).in_(uuids),
            GpuRow.node_id != node.id,
            col(GpuRow.present).is_(True),
            NodeRow.status != NodeStatus.OFFLINE.value,
        )
        .order_by(col(GpuRow.uuid))
    ).all()
    if rows:
        uuid, owner = rows[0]
        more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
        raise GpuOwned(
            f"GPU {uuid}{more} belongs to live node {owner!r}; an administrator moves it with "
            f"POST /v1/gpus/{uuid}/move",
            field="gpus",
        )


def move(db: Database, *, uuid: str, node_id: str, now: float) -> Gpu:
    """An administrator gives a GPU to another node; what it held on the old one ends."""
    with db.write(placement=True) as session:
        gpu = session.get(GpuRow, uuid)
        if gpu is None:
            raise NotFound(f"GPU {uuid} not found")
        target = session.get(NodeRow, node_id)
        if target is None:
            raise NotFound(f"node {node_id} not found", field="node_id")
        if gpu.node_id != target.id:
            placing.mark_changed(session, inventory=True)
            lifecycle.fail_gpu_owners(
                session,
                [uuid],
                now=now,
                reason=f"GPU moved to node {target.name} by an administrator",
            )
            record(
                session,
                kind="gpu",
                object_id=uuid,
                to_state="moved",
                at=now,
                reason=f"from node {gpu.node_id} to node {target.id}",
            )
            gpu.node_id = target.id
            gpu.present = True
        session.flush()
        # Whatever held it ended above, so it is nobody's now; telemetry comes with the
        # new node's next heartbeat.
        return Gpu(
            uuid=gpu.uuid,
            node_id=target.id,
            node=target.name,
            index=gpu.index,
            model=gpu.model,
            memory_mb=gpu.memory_mb,
            healthy=gpu.healthy,
        )
