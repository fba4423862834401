"""The migrated schema itself, on both databases: it refuses a second active assignment of a
GPU whatever the code above it does, and keeps ended ones as history."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from control_plane.db.engine import Database
from control_plane.db.models import AssignmentRow, GpuRow, NodeRow


def _gpu(db: Database) -> None:
    with db.write() as session:
        session.add(
            NodeRow(
                id="node_0000000000000001",
                name="n1",
                spine="spine0",
                leaf="leaf0",
                status="online",
                registered_at=1.0,
            )
        )
        session.flush()
        session.add(
            GpuRow(uuid="GPU-1", node_id="node_0000000000000001", model="A100", memory_mb=1)
        )


def _assign(db: Database, *, hold_id: str | None = None, allocation_id: str | None = None) -> None:
    with db.write() as session:
        session.add(
            AssignmentRow(
                gpu_uuid="GPU-1",
                node_id="node_0000000000000001",
                hold_id=hold_id,
                allocation_id=allocation_id,
                started_at=10.0,
            )
        )


def test_database_refuses_a_second_active_assignment_of_one_gpu(db: Database) -> None:
    _gpu(db)
    _assign(db, hold_id="hold_0000000000000001")
    with pytest.raises(IntegrityError):
        _assign(db, allocation_id="alloc_0000000000000001")
    with db.read() as session:
        rows = session.exec(select(AssignmentRow)).all()
    assert [(r.hold_id, r.ended_at) for r in rows] == [("hold_0000000000000001", None)]


def test_an_ended_assignment_does_not_block_the_next(db: Database) -> None:
    _gpu(db)
    _assign(db, hold_id="hold_0000000000000001")
    with db.write() as session:
        row = session.exec(select(AssignmentRow)).one()
        row.ended_at = 20.0
    _assign(db, allocation_id="alloc_0000000000000001")
    with pytest.raises(IntegrityError):
        _assign(db, allocation_id="alloc_0000000000000002")
    with db.read() as session:
        active = session.exec(
            select(AssignmentRow).where(col(AssignmentRow.ended_at).is_(None))
        ).all()
    assert [r.allocation_id for r in active] == ["alloc_0000000000000001"]
