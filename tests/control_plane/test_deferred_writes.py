"""Writes held back to travel with the next statement (PostgreSQL) are seen by every later
statement of the transaction, committed, and their errors belong to their own command."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from control_plane.db.engine import Database
from control_plane.db.models import AssignmentRow, EventRow
from control_plane.services import events, sql
from control_plane.services.errors import NotFound
from control_plane.services.writer import Command, GroupWriter
from tests.control_plane.conftest import Api


class _Seen(BaseModel):
    object_id: str

    @classmethod
    def of(cls, object_id: str) -> _Seen:
        return cls(object_id=object_id)


def _event(session: Session, object_id: str) -> None:
    events.record(session, kind="test", object_id=object_id, to_state="x", at=1.0)


def _events(db: Database, object_id: str) -> int:
    with db.read() as session:
        query = select(func.count()).select_from(EventRow).where(EventRow.object_id == object_id)
        return session.execute(query).scalar_one()


def test_every_later_statement_sees_a_held_back_write(db: Database) -> None:
    with db.write() as session:
        _event(session, "orm")
        # An ORM query (through SQLModel's exec), a lookup by key and a Core statement on
        # the session's connection each go after it.
        row = session.exec(select(EventRow).where(EventRow.object_id == "orm")).first()
        assert row is not None and session.get(EventRow, row[0].id) is not None
        _event(session, "core")
        found = session.connection().execute(
            text("SELECT count(*) FROM event WHERE object_id = 'core'")
        )
        assert found.scalar_one() == 1
        _event(session, "prebuilt")
        assert sql.run(session, sql.READ_EPOCH).fetchone() is not None
        _event(session, "last")  # nothing after it but the commit
    assert [_events(db, o) for o in ("orm", "core", "prebuilt", "last")] == [1, 1, 1, 1]


def _writer(api: Api) -> GroupWriter:
    return api.http.app.state.writer  # type: ignore[attr-defined]


def test_a_held_back_write_that_fails_fails_its_own_command(api: Api, db: Database) -> None:
    node = api.node("n1", gpus=2)
    gpu, node_id = node["gpus"][0]["uuid"], node["id"]
    row = {"gpu_uuid": gpu, "node_id": node_id, "hold_id": None, "started_at": 1.0}

    def assign(alloc: str):  # type: ignore[no-untyped-def]
        def use_case(session: Session, now: float):  # type: ignore[no-untyped-def]
            _event(session, alloc)
            # The unique index on active assignments refuses the second of these; on
            # PostgreSQL only when the writes reach the server, at the command's release.
            sql.send(session, sql.INSERT_ASSIGNMENT, [{**row, "allocation_id": alloc}])
            return 200, _Seen.of(alloc)

        return use_case

    def assign_nothing(name: str):  # type: ignore[no-untyped-def]
        def use_case(session: Session, now: float):  # type: ignore[no-untyped-def]
            _event(session, name)
            return 200, _Seen.of(name)

        return use_case

    def sends_then_refuses(session: Session, now: float):  # type: ignore[no-untyped-def]
        _event(session, "refused")  # held back, then dropped: the server never sees it
        raise NotFound("gone")

    batch = [
        Command(use_case=assign("first")),
        Command(use_case=sends_then_refuses),
        Command(use_case=assign("second")),
        Command(use_case=assign_nothing("after")),
    ]
    _writer(api).apply_batch(batch)
    assert batch[0].answer.result()[0] == 200
    with pytest.raises(NotFound):
        batch[1].answer.result()
    with pytest.raises(IntegrityError):
        batch[2].answer.result()
    assert batch[3].answer.result()[0] == 200
    assert [_events(db, o) for o in ("first", "refused", "second", "after")] == [1, 0, 0, 1]
    with db.read() as session:
        owners = session.execute(
            select(AssignmentRow.allocation_id).where(AssignmentRow.gpu_uuid == gpu)
        ).all()
    assert [o for (o,) in owners] == ["first"]
