"""A snapshot of database tables (by default the assignment state) to compare in tests."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import SQLModel, select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, AssignmentRow, HoldRow

ASSIGNMENT_TABLES: tuple[type[SQLModel], ...] = (HoldRow, AllocationRow, AssignmentRow)


def assignment_state(
    db: Database, tables: Sequence[type[SQLModel]] = ASSIGNMENT_TABLES
) -> dict[str, list[dict]]:
    """Every row of `tables` (by default holds, allocations and assignments), as plain dicts
    in a stable order."""
    with db.read() as session:
        return {
            table.__name__: sorted(
                (row.model_dump() for row in session.exec(select(table)).all()),
                key=lambda r: str(r.get("id", r.get("uuid"))),
            )
            for table in tables
        }
