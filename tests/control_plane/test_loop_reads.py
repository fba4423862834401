"""PostgreSQL reads on the event loop (`LoopReader`): one snapshot in one round trip, a
connection that failed is replaced rather than reused, and no more connections than its size."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from control_plane.db.engine import Database
from control_plane.services import sql
from tests.support.pg import TempPostgres
from tests.support.procs import wait_for


@pytest.fixture
def pg_db(pg_server: TempPostgres | None) -> Iterator[Database]:
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    name = pg_server.create_database(template=pg_server.template)  # type: ignore[attr-defined]
    db = Database(pg_server.url(name))
    try:
        yield db
    finally:
        db.dispose()
        pg_server.drop_database(name)


def _backends(db: Database) -> set[int]:
    """Process ids of the other sessions on this database (the reader's)."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        )
        return {r[0] for r in rows}


def test_reads_in_one_snapshot_and_a_failed_connection_is_replaced(pg_db: Database) -> None:
    async def scenario() -> None:
        reader = pg_db.loop_reader(size=2)
        assert reader is not None
        reader.bind(asyncio.get_running_loop())
        try:
            reads = [(sql.READ_EPOCH, None), (sql.READ_EPOCH, None)]
            assert await reader.read_once(reads, {}) == [[(0,)], [(0,)]]
            first = _backends(pg_db)
            assert len(first) == 1
            with pg_db.engine.connect() as conn:  # the server ends the reader's session
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first.pop()})
            with pytest.raises(OperationalError):
                await reader.read_once(reads, {})
            # The broken connection is gone, not pooled: the next read opens a fresh one.
            assert await reader.read_once(reads, {}) == [[(0,)], [(0,)]]
            assert len(_backends(pg_db)) == 1
            # Five reads at once on a reader of size 2: two connections, every read answered.
            answers = await asyncio.gather(*(reader.read_once(reads, {}) for _ in range(5)))
            assert answers == [[[(0,)], [(0,)]]] * 5
            assert len(_backends(pg_db)) <= 2
        finally:
            await reader.close()
        # A closed session's server process exits a moment after its client is gone.
        wait_for(lambda: _backends(pg_db) == set(), timeout=10, what="the reader's sessions gone")

    asyncio.run(scenario())


def test_sqlite_has_no_loop_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        assert db.loop_reader() is None
    finally:
        db.dispose()
