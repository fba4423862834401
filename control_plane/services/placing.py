"""Bridge from the database to the pure scheduling core: a cached cluster view, placement.

Each replica keeps its `ClusterState` in memory between transactions. The `cluster_epoch` row
says whether it is still true: every transaction that changes assignments or the inventory
bumps the epoch, and a replica that reads an epoch other than its view's rebuilds the view.
Assignment changes go through `lifecycle.assign`/`end_assignments`, which keep the view in
step within the transaction; a rollback throws the view away. What a transaction did to the
view is noted in its session's typed `notes` (`_ViewNotes`), which `Database` settles as the
transaction commits or rolls back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from control_plane.db.models import (
    AssignmentRow,
    GpuRow,
    HoldRow,
    NodeRow,
)
from control_plane.db.session import EpochCache, TxSession
from control_plane.metrics import placement_seconds
from control_plane.scheduling.cluster import ClusterState, GpuSlot
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import HoldView, choose_preemptions
from control_plane.schemas.allocations import AssignedGpu
from control_plane.schemas.enums import HoldStatus, NodeStatus
from control_plane.services import sql

PLACED_HOLD_STATUSES = (HoldStatus.PLACED.value, HoldStatus.WARMING.value, HoldStatus.READY.value)


@dataclass
class Cluster:
    """The core's view plus what the services need to write assignments back."""

    state: ClusterState
    node_of: dict[str, str]
    node_names: dict[str, str] = field(default_factory=dict)

    def take(self, uuids: list[str]) -> None:
        self.state.take(uuids)

    def describe(self, uuids: list[str]) -> list[AssignedGpu] | None:
        """GPUs as the API shows them, from memory; None if any is off the placement view."""
        slots = self.state.slots
        if not all(u in slots for u in uuids):
            return None
        return [
            AssignedGpu(
                uuid=u,
                node=self.node_names.get(self.node_of[u], ""),
                node_id=self.node_of[u],
                index=slots[u].index,
            )
            for u in uuids
        ]

    def free(self, uuids: list[str]) -> None:
        # GPUs off placement (offline node, unhealthy) are not in the view: nothing to free.
        known = [u for u in uuids if self.state.is_known(u) and not self.state.is_free(u)]
        self.state.free(known)


@dataclass
class _ViewNotes:
    """One write transaction's use of the placement view (`TxSession.notes`): the view it
    took and at which epoch, and whether it changed what placement sees. `Database` calls the
    three steps as the transaction ends; they keep the database's cached view exact."""

    cache: EpochCache
    cluster: Cluster | None = None
    epoch: int | None = None  # the epoch read when `cluster` was taken
    changed: bool = False
    inventory: bool = False
    new_epoch: int | None = None

    def last_statements(self, session: TxSession) -> list[tuple[str, Any]]:
        return [sql.prepared(session, sql.BUMP_EPOCH)] if self.changed else []

    def after_commit(self, rows: list[list[Any]]) -> None:
        if not self.changed:
            return
        self.new_epoch = rows[0][0][0]
        # Keep the view only if it was exact before and nobody else moved the epoch meanwhile.
        exact = (
            self.cluster is not None
            and not self.inventory
            and self.epoch is not None
            and self.new_epoch == self.epoch + 1
        )
        if exact:
            self.cache.epoch = self.new_epoch
        else:
            self.cache.forget()

    def after_rollback(self) -> None:
        self.drop()

    def drop(self) -> None:
        """The view took changes that were undone: forget it here and in the cache."""
        if self.cluster is not None:
            self.cluster = None
            self.cache.forget()


def _notes(session: Session, *, placing: bool) -> _ViewNotes:
    """This transaction's notes; `placing`: it is about to decide placement, which needs
    writers to take turns."""
    if not isinstance(session, TxSession):
        raise RuntimeError("placement notes need a session of Database.write")
    if placing and not session.serialised:
        raise RuntimeError("placement needs a write transaction with placement=True")
    if session.notes is None:
        session.notes = _ViewNotes(session.view_cache)
    assert isinstance(session.notes, _ViewNotes)
    return session.notes


def _build(session: Session) -> Cluster:
    """Placeable GPUs (present, healthy, on an online node) and which of them are taken."""
    rows = session.exec(
        select(
            GpuRow.uuid,
            GpuRow.node_id,
            NodeRow.leaf,
            NodeRow.spine,
            GpuRow.model,
            GpuRow.index,
            NodeRow.name,
        )
        .join(NodeRow, col(NodeRow.id) == col(GpuRow.node_id))
        .where(
            col(GpuRow.present).is_(True),
            col(GpuRow.healthy).is_(True),
            NodeRow.status == NodeStatus.ONLINE.value,
        )
    ).all()
    slots = [
        GpuSlot(uuid=u, node=n, leaf=leaf, spine=spine, model=m, index=i or 0)
        for u, n, leaf, spine, m, i, _ in rows
    ]
    node_of = {s.uuid: s.node for s in slots}
    taken = session.exec(
        select(AssignmentRow.gpu_uuid).where(col(AssignmentRow.ended_at).is_(None))
    ).all()
    state = ClusterState.build(slots, [u for u in taken if u in node_of])
    return Cluster(state, node_of, {n: name for _, n, _, _, _, _, name in rows})


def load_cluster(session: Session) -> Cluster:
    """This transaction's cluster view (cached across transactions while the epoch holds)."""
    notes = _notes(session, placing=True)
    if notes.cluster is not None:
        return notes.cluster
    epoch = session.epoch_at_start  # type: ignore[attr-defined]
    if epoch is None:
        epoch = sql.run(session, sql.READ_EPOCH).fetchone()[0]
    cache = notes.cache
    if cache.epoch != epoch or cache.value is None:
        cache.epoch, cache.value = None, _build(session)
    notes.cluster, notes.epoch = cache.value, epoch
    return notes.cluster


def mark_changed(session: Session, *, inventory: bool = False) -> None:
    """Note that this transaction changes what placement sees; the epoch moves at commit.

    An inventory change (a node leaving or joining placement, a GPU's health) also drops
    this transaction's view: the view cannot lose or gain GPUs in place, and a stale one would
    free and hand out GPUs of a node that just went offline. The next `load_cluster` in the
    transaction builds a fresh one from the flushed rows.
    """
    notes = _notes(session, placing=False)
    notes.changed = True
    if inventory:
        notes.inventory = True
        notes.cluster = None
        notes.cache.forget()


def drop_view(session: Session) -> None:
    """Forget this transaction's placement view (a rollback to a savepoint undid changes it
    had counted); the next `load_cluster` rebuilds it from the rows."""
    if isinstance(session, TxSession) and isinstance(session.notes, _ViewNotes):
        session.notes.drop()


def request_of(gpu_count: int, gpu_model: str | None, strategy: str) -> PlacementRequest:
    return PlacementRequest(gpu_count=gpu_count, gpu_model=gpu_model, strategy=strategy)


def find_gpus(cluster: Cluster, request: PlacementRequest) -> list[tuple[str, str]] | None:
    with placement_seconds.time():
        uuids = place(cluster.state, request)
    if uuids is None:
        return None
    return [(u, cluster.node_of[u]) for u in uuids]


def placed_hold_views(
    session: Session,
    *,
    max_confidence: float | None = None,
    exclude_hold: str | None = None,
    tenant_id: str | None = None,
) -> tuple[list[HoldView], dict[str, HoldRow]]:
    """Holds that sit on GPUs now: the candidates a real allocation may displace.

    `tenant_id` keeps only that tenant's holds: a hold may displace only its own tenant's
    weaker holds, since confidence is self-declared and one tenant's guess must not evict
    another's.
    """
    query = select(HoldRow).where(col(HoldRow.status).in_(sql.consts(PLACED_HOLD_STATUSES)))
    if tenant_id is not None:
        query = query.where(HoldRow.tenant_id == tenant_id)
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
    tenant_id: str | None = None,
) -> tuple[list[tuple[str, str]], list[HoldRow]] | None:
    """GPUs for `request` if displacing holds (only `tenant_id`'s, when given) makes it fit,
    and the holds to displace."""
    views, rows = placed_hold_views(
        session, max_confidence=max_confidence, exclude_hold=exclude_hold, tenant_id=tenant_id
    )
    if not views:
        return None
    choice = choose_preemptions(cluster.state, request, views)
    if choice is None:
        return None
    gpus = [(u, cluster.node_of[u]) for u in choice.gpu_uuids]
    return gpus, [rows[h] for h in choice.hold_ids]


def hold_on_node(session: Session, hold_id: str, node_id: str) -> bool:
    """Whether this hold has GPUs on the node now: nodes may only report on their own.

    A node the hold moved away from (it went offline and came back) still has ended rows for
    it; its late reports must not change a hold that now warms elsewhere. A claimed hold's
    GPUs stay assigned (to its allocation), so its warm-up may still be reported.
    """
    return (
        session.exec(
            select(AssignmentRow.id)
            .where(
                AssignmentRow.hold_id == hold_id,
                AssignmentRow.node_id == node_id,
                col(AssignmentRow.ended_at).is_(None),
            )
            .limit(1)
        ).first()
        is not None
    )
