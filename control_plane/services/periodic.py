"""Use cases of the periodic jobs: the pure reconciler decides what is due, these apply it."""

from __future__ import annotations

from typing import TypeVar

from sqlmodel import Session, col, delete, select

from control_plane.db.models import (
    AllocationRow,
    EventRow,
    HoldRow,
    IdempotencyRow,
    NodeRow,
    TenantRow,
)
from control_plane.scheduling.lifecycle import (
    Action,
    ActionKind,
    AllocationTiming,
    HoldTiming,
    reconcile,
)
from control_plane.schemas.enums import AllocationStatus, HoldStatus
from control_plane.services import holds, lifecycle, placing, sql
from control_plane.services.granting import schedule_pending

R = TypeVar("R", HoldRow, AllocationRow, NodeRow)

# Every tick's reads: the states in the SQL text (`sql.const`), so that a prepared statement's
# plan still finds the few live rows among the history through an index.
ACTIVE_HOLD_TIMINGS = select(
    HoldRow.id, HoldRow.status, HoldRow.start_at, HoldRow.lead_s, HoldRow.ttl_s
).where(col(HoldRow.status).in_(sql.consts(holds.ACTIVE_HOLDS)))
# Only a granted allocation's lease runs; a waiting one has none yet.
LEASED_ALLOCATIONS = select(AllocationRow.id, AllocationRow.status, AllocationRow.expires_at).where(
    AllocationRow.status == sql.const(AllocationStatus.ALLOCATED.value),
    col(AllocationRow.expires_at).is_not(None),
)


def expire_and_activate(session: Session, *, now: float) -> int:
    """Apply what the pure reconciler finds due among holds and allocations: expire those past
    their time, place holds whose lead time began, then serve the queue; returns how many
    things changed."""
    hold_timings = [
        HoldTiming(id=i, status=HoldStatus(st), start_at=start, lead_s=lead, ttl_s=ttl)
        for i, st, start, lead, ttl in session.exec(ACTIVE_HOLD_TIMINGS)
    ]
    alloc_timings = [
        AllocationTiming(id=i, status=AllocationStatus(st), expires_at=expires)
        for i, st, expires in session.exec(LEASED_ALLOCATIONS)
    ]
    due = due_targets(reconcile(hold_timings, alloc_timings, (), now))
    changed = 0
    for hold in rows_of(session, HoldRow, due[ActionKind.EXPIRE_HOLD]):
        lifecycle.end_hold(
            session, hold, HoldStatus.EXPIRED, now=now, reason="not claimed before start_at + ttl_s"
        )
        changed += 1
    for alloc in rows_of(session, AllocationRow, due[ActionKind.EXPIRE_ALLOCATION]):
        lifecycle.end_allocation(
            session, alloc, AllocationStatus.EXPIRED, now=now, reason="lease ended"
        )
        changed += 1
    session.flush()
    activate = rows_of(session, HoldRow, due[ActionKind.ACTIVATE_HOLD])
    if activate:
        cluster = placing.load_cluster(session)
        tenants = {
            t.id: t
            for t in session.exec(
                select(TenantRow).where(col(TenantRow.id).in_({h.tenant_id for h in activate}))
            )
        }
        # The most confident guesses get the GPUs first when they are short.
        for hold in sorted(activate, key=lambda h: (-h.confidence, h.start_at, h.id)):
            if holds.try_place_hold(session, cluster, hold, tenants[hold.tenant_id], now=now):
                changed += 1
    return changed + schedule_pending(session, now=now)


def due_targets(actions: list[Action]) -> dict[ActionKind, list[str]]:
    """The reconciler's actions as target ids by kind, in its order."""
    by_kind: dict[ActionKind, list[str]] = {kind: [] for kind in ActionKind}
    for action in actions:
        by_kind[action.kind].append(action.target_id)
    return by_kind


def rows_of(session: Session, model: type[R], ids: list[str]) -> list[R]:
    """The rows of `ids`, in that order."""
    if not ids:
        return []
    found = {r.id: r for r in session.exec(select(model).where(col(model.id).in_(ids)))}
    return [found[i] for i in ids if i in found]


def prune(
    session: Session, *, now: float, events_older_than_s: float, keys_older_than_s: float
) -> int:
    """Delete events and idempotency records past their age; returns how many rows went."""
    events = session.execute(delete(EventRow).where(col(EventRow.at) < now - events_older_than_s))
    keys = session.execute(
        delete(IdempotencyRow).where(col(IdempotencyRow.created_at) < now - keys_older_than_s)
    )
    return int((events.rowcount or 0) + (keys.rowcount or 0))
