"""Bring a database to the newest schema with Alembic; safe when several replicas start at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows has none: there, start one server on a file at a time
    fcntl = None  # type: ignore[assignment]

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from control_plane.db.engine import Database

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Session-level advisory lock: replicas starting together migrate one after another.
MIGRATION_LOCK_KEY = 0x6A696D67  # "jimg"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(db: Database) -> str | None:
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(db: Database, revision: str = "head") -> None:
    with _sqlite_file_lock(db):
        _upgrade(db, revision)


@contextmanager
def _sqlite_file_lock(db: Database) -> Iterator[None]:
    """On SQLite, servers started together on one file migrate one after another: SQLite's own
    lock answers a second writer's schema change with "database is locked" at once."""
    path = db.engine.url.database if db.is_sqlite else None
    if not path or path == ":memory:" or fcntl is None:
        yield
        return
    lock = Path(path).expanduser().resolve().with_name(Path(path).name + ".migrate-lock")
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _upgrade(db: Database, revision: str) -> None:
    config = alembic_config(db.url)
    with db.engine.connect() as conn:
        if not db.is_sqlite:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
            conn.commit()
        try:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            conn.commit()
        finally:
            if not db.is_sqlite:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
                conn.commit()
