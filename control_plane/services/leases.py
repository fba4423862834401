"""Leases in the database: which replica runs the periodic jobs; a dead holder's lease lapses."""

from __future__ import annotations

import logging

from sqlalchemy import Float, Select, insert, literal, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from control_plane.db.engine import Database
from control_plane.db.models import LeaseRow

log = logging.getLogger("jitgpu.jobs")

JOBS_LEASE = "jobs"


def acquire(
    db: Database, *, holder: str, ttl_s: float, now: float | None = None, name: str = JOBS_LEASE
) -> bool:
    """Take or renew the lease; True if `holder` holds it for ttl_s from now.

    "Now" is the database's clock, never a replica's: a replica whose clock runs ahead would
    otherwise see a live lease as expired and take it. `now` replaces it only where a test
    drives time by hand; servers never pass it. Renewal and takeover are one conditional
    UPDATE, so two replicas can never both win.
    """
    db_now = db.now_expr() if now is None else literal(now, Float)
    with db.write() as session:
        result = session.execute(
            update(LeaseRow)
            .where(col(LeaseRow.name) == name)
            .where((col(LeaseRow.holder) == holder) | (col(LeaseRow.expires_at) < db_now))
            .values(holder=holder, expires_at=db_now + ttl_s)
        )
        if result.rowcount == 1:
            return True
        if session.get(LeaseRow, name) is not None:
            return False
    try:
        with db.write() as session:
            session.execute(
                insert(LeaseRow).values(name=name, holder=holder, expires_at=db_now + ttl_s)
            )
        return True
    except IntegrityError:
        return False  # another replica created it first


def select_now(db: Database) -> Select[tuple[float]]:
    """A query of the database's clock (Unix seconds)."""
    return select(db.now_expr())


def database_now(db: Database) -> float:
    with db.read() as session:
        return float(session.execute(select_now(db)).scalar_one())


def holder_of(db: Database, *, name: str = JOBS_LEASE) -> tuple[str, float] | None:
    with db.read() as session:
        row = session.get(LeaseRow, name)
        return None if row is None else (row.holder, row.expires_at)


def release(db: Database, *, holder: str, name: str = JOBS_LEASE) -> None:
    """Give the lease up on a clean shutdown so another replica takes over at once."""
    with db.write() as session:
        session.execute(
            update(LeaseRow)
            .where(col(LeaseRow.name) == name, col(LeaseRow.holder) == holder)
            .values(expires_at=0.0)
        )
