"""The leader lease runs on the database's clock: a replica whose clock is ahead cannot take a
live lease (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.runner import JobRunner
from control_plane.services import leases as leader
from tests.conftest import ADMIN_TOKEN
from tests.support.procs import wait_for


@pytest.fixture
def skewed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's wall clock runs 3 s ahead, as a badly synchronised replica's would."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3.0)


def test_database_now_is_close_to_real_time(db: Database) -> None:
    with db.read() as session:
        db_now = session.execute(leader.select_now(db)).scalar_one()
    assert abs(db_now - time.time()) < 1.0


def test_a_replica_three_seconds_ahead_does_not_take_a_live_lease(
    db: Database, skewed_clock: None
) -> None:
    assert leader.acquire(db, holder="a", ttl_s=2.0)
    # With replica clocks b would compare the lease's end with its own time.time(), 3 s
    # ahead, see it expired and take over while a still runs the jobs.
    assert not leader.acquire(db, holder="b", ttl_s=2.0)
    assert leader.holder_of(db)[0] == "a"
    # Once the lease really ends (by the database's clock), b takes it.
    wait_for(
        lambda: leader.acquire(db, holder="b", ttl_s=2.0),
        timeout=5,
        what="b to take the expired lease",
    )
    assert leader.holder_of(db)[0] == "b"


def test_renewal_extends_by_the_database_clock(db: Database, skewed_clock: None) -> None:
    assert leader.acquire(db, holder="a", ttl_s=30.0)
    assert leader.acquire(db, holder="a", ttl_s=30.0)
    _, until = leader.holder_of(db)
    # The stored end is database time + ttl, not the skewed replica's time + ttl.
    assert abs(until - (time.time() - 3.0 + 30.0)) < 1.0


def test_two_replicas_one_skewed_three_seconds_ahead(db: Database) -> None:
    """Replica b's clock runs 3 s ahead of a's; the lease lasts 3 s (1.5 job intervals). By
    its own clock b would find a's fresh lease already ended and take the jobs."""
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, jobs_interval_s=2.0)
    a = JobRunner(db, settings=settings, clock=time.time)
    b = JobRunner(db, settings=settings, clock=lambda: time.time() + 3.0)
    a.renew()
    b.renew()
    assert a.is_leader and not b.is_leader
    assert leader.holder_of(db)[0] == a.holder
    # a keeps renewing; b never gets in.
    for _ in range(3):
        time.sleep(0.2)
        a.renew()
        b.renew()
        assert a.is_leader and not b.is_leader
