"""The one registry of periodic jobs; each is idempotent and runs in its own transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlmodel import col, delete, select

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.models import (
    AllocationRow,
    AssignmentRow,
    EventRow,
    HoldRow,
    IdempotencyRow,
    NodeRow,
    TenantRow,
)
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus
from control_plane.services import holds, lifecycle, placing
from control_plane.services.allocations import schedule_pending

IDEMPOTENCY_KEEP_S = 86400.0


@dataclass(frozen=True)
class Job:
    name: str
    run: Callable[[Database, ServerSettings, float], int]
    every: float = 1.0  # in units of settings.jobs_interval_s
    # Wait one heartbeat timeout after this replica becomes the leader: if the whole control
    # plane was down, no heartbeat could arrive, and silence would be the server's own.
    after_election_grace: bool = False


def liveness(db: Database, settings: ServerSettings, now: float) -> int:
    """Silent nodes go offline: their allocations are lost, their holds re-placed or failed."""
    cutoff = now - settings.heartbeat_timeout_s
    with db.write(placement=True) as session:
        silent = session.exec(
            select(NodeRow).where(
                col(NodeRow.status).in_(
                    [
                        NodeStatus.ONLINE.value,
                        NodeStatus.DRAINING.value,
                        NodeStatus.REGISTERING.value,
                    ]
                ),
                col(NodeRow.last_heartbeat_at) < cutoff,
            )
        ).all()
        for node in silent:
            lifecycle.move_node(
                session,
                node,
                NodeStatus.OFFLINE,
                now=now,
                reason=f"no heartbeat for {settings.heartbeat_timeout_s:g}s",
            )
            _evacuate(session, node, now=now)
        return len(silent)


def _evacuate(session, node: NodeRow, *, now: float) -> None:  # type: ignore[no-untyped-def]
    owners = session.exec(
        select(AssignmentRow.hold_id, AssignmentRow.allocation_id).where(
            AssignmentRow.node_id == node.id, col(AssignmentRow.ended_at).is_(None)
        )
    ).all()
    reason = f"node {node.name} went offline"
    for alloc in session.exec(
        select(AllocationRow).where(col(AllocationRow.id).in_({a for _, a in owners if a}))
    ):
        lifecycle.end_allocation(session, alloc, AllocationStatus.LOST, now=now, reason=reason)
    hold_rows = session.exec(
        select(HoldRow).where(col(HoldRow.id).in_({h for h, a in owners if h and not a}))
    ).all()
    if not hold_rows:
        return
    for hold in hold_rows:
        lifecycle.end_assignments(session, now=now, hold_id=hold.id)
    session.flush()
    cluster = placing.load_cluster(session)
    tenants = {
        t.id: t
        for t in session.exec(
            select(TenantRow).where(col(TenantRow.id).in_({h.tenant_id for h in hold_rows}))
        )
    }
    for hold in sorted(hold_rows, key=lambda h: (-h.confidence, h.created_at)):
        if not holds.replace_hold(
            session, cluster, hold, tenants[hold.tenant_id], now=now, reason=reason
        ):
            lifecycle.end_hold(
                session,
                hold,
                HoldStatus.FAILED,
                now=now,
                reason=f"{reason}; no capacity to re-place it",
            )


def hold_lifecycle(db: Database, settings: ServerSettings, now: float) -> int:
    """Expire what is past its time, place holds whose lead time began, serve the queue."""
    changed = 0
    with db.write(placement=True) as session:
        for hold in session.exec(
            select(HoldRow).where(
                col(HoldRow.status).in_(holds.ACTIVE_HOLDS), col(HoldRow.expires_at) <= now
            )
        ):
            lifecycle.end_hold(
                session,
                hold,
                HoldStatus.EXPIRED,
                now=now,
                reason="not claimed before start_at + ttl_s",
            )
            changed += 1
        for alloc in session.exec(
            select(AllocationRow).where(
                AllocationRow.status == AllocationStatus.ALLOCATED.value,
                col(AllocationRow.expires_at) <= now,
            )
        ):
            lifecycle.end_allocation(
                session, alloc, AllocationStatus.EXPIRED, now=now, reason="lease ended"
            )
            changed += 1
        session.flush()
        due = session.exec(
            select(HoldRow).where(
                HoldRow.status == HoldStatus.REQUESTED.value,
                col(HoldRow.start_at) - col(HoldRow.lead_s) <= now,
            )
        ).all()
        if due:
            cluster = placing.load_cluster(session)
            tenants = {
                t.id: t
                for t in session.exec(
                    select(TenantRow).where(col(TenantRow.id).in_({h.tenant_id for h in due}))
                )
            }
            # The most confident guesses get the GPUs first when they are short.
            for hold in sorted(due, key=lambda h: (-h.confidence, h.start_at, h.id)):
                if holds.try_place_hold(session, cluster, hold, tenants[hold.tenant_id], now=now):
                    changed += 1
        changed += schedule_pending(session, now=now)
    return changed


def retention(db: Database, settings: ServerSettings, now: float) -> int:
    """Prune events past the retention age and idempotency records past a day."""
    with db.write() as session:
        events = session.execute(
            delete(EventRow).where(col(EventRow.at) < now - settings.retention_days * 86400)
        )
        keys = session.execute(
            delete(IdempotencyRow).where(col(IdempotencyRow.created_at) < now - IDEMPOTENCY_KEEP_S)
        )
        return int((events.rowcount or 0) + (keys.rowcount or 0))


JOBS: tuple[Job, ...] = (
    Job("liveness", liveness, after_election_grace=True),
    Job("hold_lifecycle", hold_lifecycle),
    Job("retention", retention, every=300.0),
)


def run_all(db: Database, settings: ServerSettings, now: float) -> dict[str, int]:
    """Run every job once (tests and `jitgpu` tooling call this with a fixed `now`)."""
    return {job.name: job.run(db, settings, now) for job in JOBS}
