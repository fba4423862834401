"""SQLite engines: the connection settings every connection gets, and its private files."""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from control_plane.db.session import as_sqlalchemy_error

SQLITE_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


def sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL; None for an in-memory database."""
    parsed = make_url(url)
    if parsed.database and parsed.database != ":memory:" and "mode=memory" not in url:
        return parsed.database
    return None


def _private_sqlite_files(database: str) -> None:
    """Create the SQLite file 0600 (SQLite gives its -wal and -shm files the database file's
    mode) and take group and other access away from files an older version left readable."""
    path = Path(database).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in ("", "-wal", "-shm", "-journal"):
        part = path.with_name(path.name + suffix)
        try:
            if part.stat().st_mode & 0o077:
                os.chmod(part, 0o600)
        except FileNotFoundError:
            continue
        except PermissionError:  # not ours: leave it to its owner
            continue


def sqlite_engine(
    url: str, synchronous: str, *, busy_ms: int = 30000, pool_size: int = 8, max_overflow: int = 24
) -> Engine:
    database = sqlite_file(url)
    if database is not None:
        _private_sqlite_files(database)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_ms / 1000},
        pool_size=pool_size,
        max_overflow=max_overflow,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # pysqlite's own transaction handling defers BEGIN; we emit BEGIN ourselves so that
        # writers can take the write lock up front (BEGIN IMMEDIATE) and never deadlock.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # No commit copies the log back itself (it would hold the write mutex through it):
        # `WalCheckpointer` does, after the commit, on its own thread.
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()
        # Decayed usage is charged in SQL (`sql.CHARGE_USAGE`); SQLite has `power` only
        # when built with its math functions, so every connection gets the same one.
        dbapi_connection.create_function("power", 2, math.pow, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # type: ignore[no-untyped-def]
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        # On the DB-API connection: through `exec_driver_sql` the BEGIN cost more than the
        # read it opens (every heartbeat's reads are one such transaction).
        statement = _BEGIN[mode]
        try:
            connection.connection.driver_connection.execute(statement)
        except sqlite3.Error as exc:  # as SQLAlchemy would raise it (a busy file included)
            raise as_sqlalchemy_error(connection.dialect, statement, None, exc) from exc

    return engine
