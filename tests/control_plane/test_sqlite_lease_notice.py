"""What a server on SQLite says when it finds the jobs lease taken: after a kill -9 and a quick
restart the holder is the previous run, not a second server, and the message must say so."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.jobs.runner import JobRunner
from control_plane.services import leases as leader
from tests.conftest import ADMIN_TOKEN, FakeClock
from tests.support.procs import wait_for

# The lease runs on the database's clock (real time), whatever the replica's clock says.
TODAY = datetime.now(UTC).date().isoformat()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'jitgpu.db'}")
    upgrade(db)
    try:
        yield db
    finally:
        db.dispose()


def _runner(db: Database, clock: FakeClock) -> JobRunner:
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, jobs_interval_s=2.0)
    return JobRunner(db, settings=settings, clock=clock)


def _dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(child.stdout)


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "jitgpu.jobs")


def test_lease_left_by_a_killed_run_is_named_as_such(
    sqlite_db: Database, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    previous = f"{socket.gethostname()}:{_dead_pid()}:abc123"
    assert leader.acquire(sqlite_db, holder=previous, ttl_s=3.0)
    runner = _runner(sqlite_db, clock)
    with caplog.at_level(logging.INFO, logger="jitgpu.jobs"):
        runner.renew()
    said = _messages(caplog)
    assert "previous run" in said and previous in said
    # When, in UTC, and how long (by the database's clock: a moment has passed since).
    assert f"{TODAY}T" in said and re.search(r"in (2\.\d|3\.0)s", said)
    assert "another server" not in said and "SQLite supports one replica" not in said
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)
    assert not runner.is_leader
    clock.advance(3.1)

    def took_over() -> bool:
        runner.renew()
        return runner.is_leader

    wait_for(took_over, timeout=10, what="the expired lease to pass to the new run")
    assert runner.is_leader and leader.holder_of(sqlite_db)[0] == runner.holder  # type: ignore[index]


def test_lease_of_a_live_process_warns_with_holder_and_expiry(
    sqlite_db: Database, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # This very process is alive: it could be a second server, so the warning stays, but it
    # says who and until when, and that it may only be a previous run.
    other = f"{socket.gethostname()}:{os.getpid()}:live99"
    assert leader.acquire(sqlite_db, holder=other, ttl_s=3.0)
    with caplog.at_level(logging.INFO, logger="jitgpu.jobs"):
        _runner(sqlite_db, clock).renew()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, _messages(caplog)
    assert other in warnings[0] and f"held until {TODAY}T" in warnings[0]
    assert "previous run" in warnings[0] and "SQLite supports one replica" in warnings[0]


def test_lease_of_another_host_warns(
    sqlite_db: Database, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    other = "some-other-host:1:abcdef"
    assert leader.acquire(sqlite_db, holder=other, ttl_s=3.0)
    with caplog.at_level(logging.INFO, logger="jitgpu.jobs"):
        _runner(sqlite_db, clock).renew()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and other in warnings[0]
