"""Shared fixtures: both databases (SQLite file and a throwaway PostgreSQL), the app, a clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from tests.support.pg import PostgresUnavailable, TempPostgres

REQUIRE_POSTGRES = os.environ.get("JITGPU_REQUIRE_POSTGRES") == "1"
ADMIN_TOKEN = "admin-token-for-tests-0123456789"


class FakeClock:
    """A clock the test moves by hand: no test sleeps on real time."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture(autouse=True)
def _own_config_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """No test reads (or writes) the credentials `jitgpu login` saved for the person running it."""
    monkeypatch.setenv("JITGPU_CONFIG_DIR", str(tmp_path_factory.mktemp("jitgpu-config")))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres | None]:
    try:
        server = TempPostgres().start()
    except (PostgresUnavailable, OSError) as exc:
        if REQUIRE_POSTGRES:
            pytest.fail(f"JITGPU_REQUIRE_POSTGRES=1 but no PostgreSQL could start: {exc}")
        yield None
        return
    try:
        template = server.create_database()
        db = Database(server.url(template))
        upgrade(db)
        db.dispose()
        server.template = template  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jitgpu.db'}"
        return
    server: TempPostgres | None = request.getfixturevalue("pg_server")
    if server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    name = server.create_database(template=server.template)  # type: ignore[attr-defined]
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables yet: a server process migrates it at start, a migration test
    builds an old schema in it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    server: TempPostgres | None = request.getfixturevalue("pg_server")
    if server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    name = server.create_database()  # not the template, which is at head already
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    try:
        yield database
    finally:
        database.dispose()
