"""Use cases of the periodic jobs: expire what is past its time, place due holds, prune."""

from __future__ import annotations

from sqlmodel import Session, col, delete, select

from control_plane.db.models import AllocationRow, EventRow, HoldRow, IdempotencyRow, TenantRow
from control_plane.schemas.enums import AllocationStatus, HoldStatus
from control_plane.services import holds, lifecycle, placing
from control_plane.services.granting import schedule_pending


def expire_and_activate(session: Session, *, now: float) -> int:
    """Expire holds and allocations past their time, place holds whose lead time began, and
    serve the queue; returns how many things changed."""
    changed = 0
    for hold in session.exec(
        select(HoldRow).where(
            col(HoldRow.status).in_(holds.ACTIVE_HOLDS), col(HoldRow.expires_at) <= now
        )
    ):
        lifecycle.end_hold(
            session, hold, HoldStatus.EXPIRED, now=now, reason="not claimed before start_at + ttl_s"
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
    return changed + schedule_pending(session, now=now)


def prune(
    session: Session, *, now: float, events_older_than_s: float, keys_older_than_s: float
) -> int:
    """Delete events and idempotency records past their age; returns how many rows went."""
    events = session.execute(delete(EventRow).where(col(EventRow.at) < now - events_older_than_s))
    keys = session.execute(
        delete(IdempotencyRow).where(col(IdempotencyRow.created_at) < now - keys_older_than_s)
    )
    return int((events.rowcount or 0) + (keys.rowcount or 0))
