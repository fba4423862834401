"""Engines and transactions for SQLite (default, WAL) and PostgreSQL; the only place they differ."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    create_engine,
    literal_column,
)
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from control_plane.db.loopreads import LoopReader
from control_plane.db.pinging import ping_when_idle
from control_plane.db.session import EpochCache, RawReadSession, TxSession
from control_plane.db.sqlite import SQLITE_SYNCHRONOUS, sqlite_engine, sqlite_file
from control_plane.db.wal import CHECKPOINT_AFTER_S, CHECKPOINT_EVERY, WalCheckpointer

DEFAULT_DATABASE_URL = "sqlite:///jitgpu.db"

log = logging.getLogger(__name__)

# Key of the PostgreSQL transaction-level advisory lock that serialises placement decisions.
# Best fit is deterministic, so two concurrent placements would pick the same GPUs and one
# would fail on the unique index; taking turns is cheaper than retrying.
PLACEMENT_LOCK_KEY = 0x6A697467  # "jitg"
_PLACEMENT_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_READ_EPOCH = "SELECT value FROM cluster_epoch WHERE id = 1"


class DatabaseConfigError(ValueError):
    """The database URL or a database setting is not usable; the message says which."""


def normalise_url(url: str) -> str:
    """Accept plain postgresql:// URLs and point them at the psycopg 3 driver."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


class ReadWouldWait(Exception):
    """A read on the event loop's thread found the database busy: do it on a worker thread."""


class WriteWouldWait(Exception):
    """A write on the event loop's thread found another writer: do it on the writer thread."""


def _busy(exc: OperationalError) -> bool:
    return "locked" in str(exc.orig) or "busy" in str(exc.orig)


class Database:
    """One engine plus the two kinds of transaction the services use: read and write."""

    def __init__(
        self,
        url: str | None = None,
        *,
        checkpoint_every: int = CHECKPOINT_EVERY,
        checkpoint_after_s: float = CHECKPOINT_AFTER_S,
    ) -> None:
        self._commit_hooks: list[Callable[[set[str]], None]] = []
        self.view_cache = EpochCache()
        self._loop_connections = threading.local()
        # The raw read session of each kept-open loop reader connection (`loop_read_raw`).
        self._raw_readers: dict[Connection, RawReadSession] = {}
        self._loop_opened: list[Connection] = []
        self._loop_lock = threading.Lock()
        raw = url or os.environ.get("JITGPU_DATABASE_URL") or DEFAULT_DATABASE_URL
        self.url = normalise_url(raw)
        if self.url.startswith("sqlite"):
            synchronous = os.environ.get("JITGPU_SQLITE_SYNCHRONOUS", "NORMAL").upper()
            if synchronous not in SQLITE_SYNCHRONOUS:
                raise DatabaseConfigError(
                    f"JITGPU_SQLITE_SYNCHRONOUS={synchronous!r}: allowed values are "
                    + ", ".join(SQLITE_SYNCHRONOUS)
                )
            self.is_sqlite = True
            self.engine = sqlite_engine(self.url, synchronous)
            self._write_bind = self.engine.execution_options(sqlite_begin="IMMEDIATE")
            # SQLite has one writer. Queueing writers on a mutex here is far cheaper than
            # letting them meet at BEGIN IMMEDIATE, where SQLite's busy handler sleeps.
            self._write_mutex: threading.Lock | None = threading.Lock()
            on_disk = sqlite_file(self.url) is not None  # not an in-memory database
            self._wal: WalCheckpointer | None = (
                WalCheckpointer(
                    self.engine,
                    self._write_mutex,
                    every=checkpoint_every,
                    after_s=checkpoint_after_s,
                )
                if on_disk
                else None
            )
            # Reads that never wait (WAL: a reader does not wait on the writer, and a busy
            # file is an error at once, not a sleep), for the event loop's own thread.
            self._loop_engine: Engine | None = (
                sqlite_engine(self.url, synchronous, busy_ms=0, pool_size=4, max_overflow=4)
                if on_disk
                else None
            )
            # Commits that do not wait on the disk (WAL, NORMAL or OFF: no fsync but at a
            # checkpoint, which `WalCheckpointer` runs off the loop) may run on the loop too.
            self._loop_commits = synchronous in ("NORMAL", "OFF")
        elif self.url.startswith("postgresql"):
            self.is_sqlite = False
            self.engine = create_engine(self.url, pool_size=10, max_overflow=30, pool_recycle=1800)
            ping_when_idle(self.engine)
            # Write transactions send their own BEGIN and COMMIT (`TxSession.start`,
            # `commit_with`), each with other statements: psycopg's own were round trips alone.
            self._write_bind = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            self._write_mutex = None
            self._wal = None
            self._loop_engine = None
            self._loop_commits = False
        else:
            raise DatabaseConfigError(
                f"database URL {raw!r}: allowed schemes are sqlite:/// and postgresql+psycopg://"
            )

    def on_commit(self, hook: Callable[[set[str]], None]) -> Callable[[], None]:
        """Call `hook` with the touched nodes after each write that touched some; returns the
        function that removes it."""
        self._commit_hooks.append(hook)
        return lambda: self._commit_hooks.remove(hook)

    def now_expr(self) -> ColumnElement[float]:
        """The database's own clock in Unix seconds, for comparisons several replicas must
        agree on (each replica's clock may be off; the database has one)."""
        if self.is_sqlite:
            return literal_column("((julianday('now') - 2440587.5) * 86400.0)", Float)
        return literal_column("extract(epoch from clock_timestamp())::float8", Float)

    @contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[Session]:
        """A read-only transaction; never takes the write lock.

        SQLite (WAL) reads one snapshot anyway; on PostgreSQL `snapshot=True` makes all its
        statements see the same commits (REPEATABLE READ) instead of each its own.
        """
        with TxSession(self.engine, cache=self.view_cache) as session, session.begin():
            if snapshot and not self.is_sqlite:
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield session

    def loop_reader(self, size: int = 4) -> LoopReader | None:
        """Reads on the event loop for PostgreSQL (`LoopReader`, for prebuilt statements);
        None for SQLite, whose `loop_read_raw` needs no network. Its owner closes it."""
        if self.is_sqlite:
            return None
        _, connect = self.engine.dialect.create_connect_args(self.engine.url)
        return LoopReader(self.engine.dialect, connect, size=size)

    @property
    def loop_reads(self) -> bool:
        """Whether `loop_read` may be used: a local SQLite file, read without a network trip.

        A hop to a worker thread costs more CPU than such a read (a heartbeat's reads take
        about 0.1 ms; the hop, with the interpreter lock changing hands, about 1 ms here).
        """
        return self._loop_engine is not None

    @contextmanager
    def loop_read(self) -> Iterator[Session]:
        """A read-only transaction for the event loop's own thread (only if `loop_reads`).

        It never sleeps on a lock: where SQLite would make it wait (a checkpoint or recovery
        holding the file), it raises `ReadWouldWait`, and the caller reads on a worker thread.
        """
        if self._loop_engine is None:
            raise ReadWouldWait("no reads on the event loop with this database")
        with self._on_loop_connection("reader", ReadWouldWait):
            session = TxSession(self._loop_connection("reader"), cache=self.view_cache)
            with session, session.begin():
                yield session

    @contextmanager
    def loop_read_raw(self) -> Iterator[Session]:
        """`loop_read` for prebuilt statements only (`sql.run`, `sql.row`): BEGIN and ROLLBACK
        go straight to the DB-API connection, past SQLAlchemy's session and connection
        transactions, which cost more than a heartbeat's reads."""
        if self._loop_engine is None:
            raise ReadWouldWait("no reads on the event loop with this database")
        with self._on_loop_connection("reader", ReadWouldWait):
            connection = self._loop_connection("reader")
            reader = self._raw_readers.get(connection)
            if reader is None:
                reader = self._raw_readers[connection] = RawReadSession(
                    connection, cache=self.view_cache
                )
            reader.run_bare("BEGIN DEFERRED")
            try:
                yield reader
            finally:
                # Nothing was written; ended either way, so the next read sees new commits.
                reader.run_bare("ROLLBACK")

    @property
    def loop_writes(self) -> bool:
        """Whether `loop_write` may be used: a local SQLite file whose commits do not wait
        on the disk. The group-commit writer then commits on the event loop's thread, where
        a batch no longer hands the interpreter lock to and from a writer thread for each of
        its statements (measured in BENCHMARKS.md)."""
        return self._loop_engine is not None and self._loop_commits

    @contextmanager
    def loop_write(self) -> Iterator[Session]:
        """A placement write transaction for the event loop's own thread (only if
        `loop_writes`); committed when the block ends.

        It never waits: if another thread of this process or another process writes, it
        raises `WriteWouldWait` before anything is done, and the caller writes on a thread.
        """
        if not self.loop_writes or self._write_mutex is None:
            raise WriteWouldWait("no writes on the event loop with this database")
        if not self._write_mutex.acquire(blocking=False):
            raise WriteWouldWait("another writer of this process holds the database")
        try:
            with self._on_loop_connection("writer", WriteWouldWait):
                session = TxSession(
                    self._loop_connection("writer"), serialised=True, cache=self.view_cache
                )
                # BEGIN IMMEDIATE: the write lock, or busy at once.
                with session, self._transaction(session):
                    yield session
        finally:
            self._write_mutex.release()
        self._publish(session.touched_nodes)
        if self._wal is not None:
            self._wal.committed()

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file now (a SQLite file; blocking: call
        it off the event loop). Commits start one every so often by themselves."""
        if self._wal is not None:
            self._wal.run()

    def wait_for_checkpoint(self) -> None:
        """Until the checkpoint that commits started last has finished."""
        if self._wal is not None:
            self._wal.wait()

    def _loop_connection(self, role: str) -> Connection:
        """This thread's kept-open connection for `role` (reader, writer): a checkout from
        the pool per transaction cost about as much as a heartbeat's reads."""
        connection = getattr(self._loop_connections, role, None)
        if connection is None:
            assert self._loop_engine is not None
            connection = self._loop_engine.connect()
            if role == "writer":
                connection = connection.execution_options(sqlite_begin="IMMEDIATE")
            setattr(self._loop_connections, role, connection)
            with self._loop_lock:
                self._loop_opened.append(connection)
        return connection

    @contextmanager
    def write(self, *, placement: bool = False) -> Iterator[Session]:
        """One use case's transaction: committed when the block ends, rolled back on error.

        On SQLite the write lock is taken at BEGIN, so the whole use case is serialised.
        On PostgreSQL `placement=True` takes the placement advisory lock for the transaction.
        """
        if self._write_mutex is None:
            with self._write_session(placement) as session:
                yield session
            return
        with self._write_mutex, self._write_session(placement) as session:
            yield session
        if self._wal is not None:  # committed, and the mutex is free again
            self._wal.committed()

    @contextmanager
    def _write_session(self, placement: bool) -> Iterator[Session]:
        # Placement and assignment changes need writers to take turns (services check).
        serialised = placement or self.is_sqlite
        session = TxSession(
            self._write_bind,
            serialised=serialised,
            cache=self.view_cache,
            pipelines=not self.is_sqlite,
        )
        with session:
            with self._transaction(session):
                if placement and not self.is_sqlite:
                    # Waited for: the clock is read after it. The epoch comes in the same
                    # round trip, for the placement view (`TxSession.epoch_at_start`).
                    _, (_, epoch) = session.run_raw_together(
                        [(_PLACEMENT_LOCK, (PLACEMENT_LOCK_KEY,)), (_READ_EPOCH, None)]
                    )
                    session.epoch_at_start = epoch[0][0] if epoch else None
                yield session
            # Reached only once committed: a rolled-back change wakes nobody.
            self._publish(session.touched_nodes)

    @contextmanager
    def _transaction(self, session: TxSession) -> Iterator[None]:
        """Where every write transaction begins and ends: the notes a layer above left in it
        run their last statements before the commit, and learn whether it committed."""
        rows: list[list[Any]] = []
        try:
            with session.begin():
                # Begin now (on SQLite, take the write lock), before the caller reads the
                # clock, so that recorded times follow the order of commits.
                session.start()
                yield
                # What the ORM holds goes now, inside the transaction: on PostgreSQL the
                # session's COMMIT comes before SQLAlchemy's own end of the transaction.
                session.flush()
                last = session.notes.last_statements(session) if session.notes else []
                rows = session.commit_with(last)
        except Exception:
            if not session.committed:
                if session.notes is not None:
                    session.notes.after_rollback()
                raise
            # PostgreSQL committed (the session sent COMMIT) and something after failed, such
            # as SQLAlchemy's own end of the transaction: the changes stand, so the caller must
            # hear that they did (the writer would otherwise run its batch again).
            log.exception("after a commit")
        except BaseException:
            if not session.committed and session.notes is not None:
                session.notes.after_rollback()
            raise
        if session.notes is not None:
            try:
                session.notes.after_commit(rows)
            except Exception:
                # Committed: the caller must hear so (the writer would run its batch again).
                log.exception("after a commit, settling the transaction's notes")
                session.view_cache.forget()

    def _publish(self, touched: set[str]) -> None:
        if touched:
            for hook in list(self._commit_hooks):
                try:
                    hook(touched)
                except Exception:
                    # After the commit: a hook's failure must not read as the write's.
                    log.exception("a commit hook failed")

    @contextmanager
    def _on_loop_connection(self, role: str, would_wait: type[Exception]) -> Iterator[None]:
        """A database error on the loop's connection for `role` drops that connection (the
        next use opens a fresh one); a busy file becomes `would_wait`, for the caller to do
        the work on a thread instead."""
        try:
            yield
        except OperationalError as exc:
            self._drop_loop_connection(role)
            if _busy(exc):
                raise would_wait(str(exc.orig)) from exc
            raise

    def _drop_loop_connection(self, role: str) -> None:
        connection = getattr(self._loop_connections, role, None)
        setattr(self._loop_connections, role, None)
        if connection is not None:
            self._raw_readers.pop(connection, None)
            with self._loop_lock:
                self._loop_opened.remove(connection)
            connection.close()

    def dispose(self) -> None:
        if self._wal is not None:
            self._wal.close()
        self.engine.dispose()
        with self._loop_lock:
            opened, self._loop_opened = self._loop_opened, []
        self._raw_readers = {}
        for connection in opened:
            connection.invalidate()  # another thread's: closed without touching its state
        self._loop_connections = threading.local()
        if self._loop_engine is not None:
            self._loop_engine.dispose()
