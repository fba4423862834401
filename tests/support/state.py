"""A snapshot of the assignment state (holds, allocations, assignments) to compare in tests."""

from __future__ import annotations

from sqlmodel import select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, AssignmentRow, HoldRow


def assignment_state(db: Database) -> dict[str, list[dict]]:
    """Every hold, allocation and assignment row, as plain dicts in a stable order."""
    with db.read() as session:
        return {
            table.__name__: sorted(
                (row.model_dump() for row in session.exec(select(table)).all()),
                key=lambda r: str(r.get("id")),
            )
            for table in (HoldRow, AllocationRow, AssignmentRow)
        }
