"""PostgreSQL pool health: a connection that sat idle is pinged (and replaced if dead) before
use; one in use moments ago is not, and if it died its one failure resets the pool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from control_plane.db.pinging import ping_when_idle
from tests.support.pg import TempPostgres


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pooled(pg_server: TempPostgres | None) -> Iterator[tuple[Engine, Clock, TempPostgres]]:
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    name = pg_server.create_database()
    engine = create_engine(pg_server.url(name), pool_size=1, max_overflow=0)
    clock = Clock()
    ping_when_idle(engine, idle_s=1.0, clock=clock)
    try:
        yield engine, clock, pg_server
    finally:
        engine.dispose()
        pg_server.drop_database(name)


def _backend(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def _kill(server: TempPostgres, pid: int) -> None:
    server.admin(f"SELECT pg_terminate_backend({pid})")


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(pooled) -> None:  # type: ignore[no-untyped-def]
    engine, clock, server = pooled
    first = _backend(engine)
    _kill(server, first)
    clock.now += 1.5  # it sat in the pool longer than idle_s
    assert _backend(engine) != first  # the ping found it dead: a fresh connection served


def test_a_connection_used_moments_ago_is_not_pinged(pooled) -> None:  # type: ignore[no-untyped-def]
    engine, clock, server = pooled
    first = _backend(engine)
    _kill(server, first)
    clock.now += 0.5
    # Not pinged: its statement meets the dead connection (the writer then runs its batch
    # again command by command), and that failure resets the pool for the next use.
    with pytest.raises(OperationalError):
        _backend(engine)
    assert _backend(engine) != first
