"""Read-only use cases: lists and look-ups of allocations, holds and events, tenant-scoped."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import col, select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, EventRow, HoldRow
from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.common import utc_from_epoch
from control_plane.schemas.enums import AllocationStatus, HoldStatus
from control_plane.schemas.events import Event
from control_plane.services.allocations import tenant_allocation_or_404
from control_plane.services.views import allocation_view, allocation_views, hold_views


def get_allocation(db: Database, *, tenant_id: str | None, allocation_id: str) -> Allocation:
    with db.read() as session:
        row = tenant_allocation_or_404(session, tenant_id=tenant_id, allocation_id=allocation_id)
        return allocation_view(session, row)


def list_allocations(
    db: Database, *, tenant_id: str | None, statuses: Sequence[AllocationStatus] | None, limit: int
) -> list[Allocation]:
    query = select(AllocationRow)
    if tenant_id is not None:
        query = query.where(AllocationRow.tenant_id == tenant_id)
    if statuses:
        query = query.where(col(AllocationRow.status).in_([s.value for s in statuses]))
    query = query.order_by(col(AllocationRow.requested_at).desc()).limit(limit)
    with db.read() as session:
        return allocation_views(session, session.exec(query).all())


def list_holds(
    db: Database, *, tenant_id: str | None, statuses: Sequence[HoldStatus] | None, limit: int
) -> list[Hold]:
    query = select(HoldRow)
    if tenant_id is not None:
        query = query.where(HoldRow.tenant_id == tenant_id)
    if statuses:
        query = query.where(col(HoldRow.status).in_([s.value for s in statuses]))
    query = query.order_by(col(HoldRow.created_at).desc()).limit(limit)
    with db.read() as session:
        return hold_views(session, session.exec(query).all())


def list_events(
    db: Database, *, tenant_id: str | None, after_id: int, object_id: str | None, limit: int
) -> list[Event]:
    query = select(EventRow).where(col(EventRow.id) > after_id)
    if tenant_id is not None:
        query = query.where(EventRow.tenant_id == tenant_id)
    if object_id is not None:
        query = query.where(EventRow.object_id == object_id)
    query = query.order_by(col(EventRow.id)).limit(limit)
    with db.read() as session:
        return [
            Event(
                id=e.id or 0,
                at=utc_from_epoch(e.at),
                kind=e.kind,
                object_id=e.object_id,
                tenant_id=e.tenant_id,
                from_state=e.from_state,
                to_state=e.to_state,
                reason=e.reason,
            )
            for e in session.exec(query).all()
        ]
