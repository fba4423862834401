"""State changes: checked against the core's transition tables and recorded in the events feed."""

from __future__ import annotations

from typing import Protocol

from sqlmodel import Session

from control_plane.scheduling.transitions import check_transition
from control_plane.services import sql


class Stateful(Protocol):
    id: str
    status: str
    tenant_id: str


def record(
    session: Session,
    *,
    kind: str,
    object_id: str,
    to_state: str,
    at: float,
    tenant_id: str | None = None,
    from_state: str | None = None,
    reason: str | None = None,
) -> None:
    # A Core insert: events are write-only here, and the ORM's unit of work costs more.
    sql.send(
        session,
        sql.INSERT_EVENT,
        {
            "at": at,
            "kind": kind,
            "object_id": object_id,
            "tenant_id": tenant_id,
            "from_state": from_state,
            "to_state": to_state,
            "reason": reason,
        },
    )


def move(
    session: Session, row: Stateful, kind: str, new: str, *, now: float, reason: str | None = None
) -> None:
    """Move `row` to `new` if the table allows it (else IllegalTransition), with an event."""
    old = row.status
    check_transition(kind, old, new)
    row.status = new
    record(
        session,
        kind=kind,
        object_id=row.id,
        tenant_id=row.tenant_id,
        from_state=old,
        to_state=new,
        at=now,
        reason=reason,
    )


def note(session: Session, row: Stateful, kind: str, *, now: float, reason: str) -> None:
    """An event about `row` that changes nothing of its state (it stays where it is)."""
    record(
        session,
        kind=kind,
        object_id=row.id,
        tenant_id=row.tenant_id,
        from_state=row.status,
        to_state=row.status,
        at=now,
        reason=reason,
    )
