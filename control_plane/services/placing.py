"""Bridge from the database to the pure scheduling core: cluster view, placement, preemption."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, col, select

from control_plane.db.models import AssignmentRow, GpuRow, HoldRow, NodeRow
from control_plane.scheduling.cluster import ClusterState, GpuSlot
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import HoldView, choose_preemptions
from control_plane.schemas.enums import HoldStatus, NodeStatus

PLACED_HOLD_STATUSES = (HoldStatus.PLACED.value, HoldStatus.WARMING.value, HoldStatus.READY.value)


@dataclass
class Cluster:
    """The core's view plus what the services need to write assignments back."""

    state: ClusterState
    node_of: dict[str, str]


def load_cluster(session: Session) -> Cluster:
    """Placeable GPUs (present, healthy, on an online node) and which of them are taken."""
    rows = session.exec(
        select(GpuRow.uuid, GpuRow.node_id, NodeRow.leaf, NodeRow.spine, GpuRow.model, GpuRow.index)
        .join(NodeRow, col(NodeRow.id) == col(GpuRow.node_id))
        .where(
            col(GpuRow.present).is_(True),
            col(GpuRow.healthy).is_(True),
            NodeRow.status == NodeStatus.ONLINE.value,
        )
    ).all()
    slots = [
        GpuSlot(uuid=u, node=n, leaf=leaf, spine=spine, model=m, index=i or 0)
        for u, n, leaf, spine, m, i in rows
    ]
    node_of = {s.uuid: s.node for s in slots}
    taken = session.exec(
        select(AssignmentRow.gpu_uuid).where(col(AssignmentRow.ended_at).is_(None))
    ).all()
    return Cluster(ClusterState.build(slots, [u for u in taken if u in node_of]), node_of)


def request_of(gpu_count: int, gpu_model: str | None, strategy: str) -> PlacementRequest:
    return PlacementRequest(gpu_count=gpu_count, gpu_model=gpu_model, strategy=strategy)


def find_gpus(cluster: Cluster, request: PlacementRequest) -> list[tuple[str, str]] | None:
    uuids = place(cluster.state, request)
    if uuids is None:
        return None
    return [(u, cluster.node_of[u]) for u in uuids]


def placed_hold_views(
    session: Session, *, max_confidence: float | None = None, exclude_hold: str | None = None
) -> tuple[list[HoldView], dict[str, HoldRow]]:
    """Holds that sit on GPUs now: the candidates a real allocation may displace."""
    query = select(HoldRow).where(col(HoldRow.status).in_(PLACED_HOLD_STATUSES))
    if max_confidence is not None:
        query = query.where(HoldRow.confidence < max_confidence)
    holds = {h.id: h for h in session.exec(query).all() if h.id != exclude_hold}
    if not holds:
        return [], {}
    gpus: dict[str, list[str]] = {h: [] for h in holds}
    for uuid, hold_id in session.exec(
        select(AssignmentRow.gpu_uuid, AssignmentRow.hold_id).where(
            col(AssignmentRow.ended_at).is_(None),
            col(AssignmentRow.allocation_id).is_(None),
            col(AssignmentRow.hold_id).in_(list(holds)),
        )
    ).all():
        gpus[hold_id].append(uuid)
    views = [
        HoldView(
            id=h.id,
            tenant_id=h.tenant_id,
            gpu_uuids=tuple(sorted(gpus[h.id])),
            confidence=h.confidence,
            created_at=h.created_at,
        )
        for h in holds.values()
        if gpus[h.id]
    ]
    return views, holds


def find_gpus_preempting(
    session: Session,
    cluster: Cluster,
    request: PlacementRequest,
    *,
    max_confidence: float | None = None,
    exclude_hold: str | None = None,
) -> tuple[list[tuple[str, str]], list[HoldRow]] | None:
    """GPUs for `request` if displacing holds makes it fit, and the holds to displace."""
    views, rows = placed_hold_views(
        session, max_confidence=max_confidence, exclude_hold=exclude_hold
    )
    if not views:
        return None
    choice = choose_preemptions(cluster.state, request, views)
    if choice is None:
        return None
    gpus = [(u, cluster.node_of[u]) for u in choice.gpu_uuids]
    return gpus, [rows[h] for h in choice.hold_ids]


def hold_gpu_uuids(session: Session, hold_id: str) -> list[str]:
    """GPUs a hold sits on now."""
    return list(
        session.exec(
            select(AssignmentRow.gpu_uuid).where(
                AssignmentRow.hold_id == hold_id, col(AssignmentRow.ended_at).is_(None)
            )
        ).all()
    )


def hold_on_node(session: Session, hold_id: str, node_id: str) -> bool:
    """Whether this hold has (or had) GPUs on the node: nodes may only report on their own."""
    return (
        session.exec(
            select(AssignmentRow.id)
            .where(AssignmentRow.hold_id == hold_id, AssignmentRow.node_id == node_id)
            .limit(1)
        ).first()
        is not None
    )
