"""The session of our transactions: what a transaction notes, and writes sent in one round trip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session


@dataclass
class EpochCache:
    """A value derived from the rows, good while the database's epoch is still `epoch`; one
    per `Database`, so each database (and each test's) keeps its own."""

    epoch: int | None = None
    value: Any = None

    def forget(self) -> None:
        self.epoch, self.value = None, None


@dataclass
class BatchAdmissions:
    """Tenants' admission reads (`hotpath.admission_of`) that later commands of one writer
    batch reuse instead of reading again (a round trip each on PostgreSQL). Exact while only
    commands whose effect on them is known run: an allocation placed at once adds its GPUs to
    its tenant's running ones, a release that serves nobody from the queue takes them off.
    Such a command says so (`kept`); after any other command, or one that failed, the writer
    drops them all. The batch holds the placement lock (PostgreSQL) or the write lock
    (SQLite), so no other writer changes what a tenant runs or queues meanwhile, nor its
    limits (`tenants.update_tenant` takes the same lock)."""

    # Tenant id -> (its row, requests waiting, online GPUs running, batch GPUs running).
    tenants: dict[str, tuple[dict[str, Any], int, int, int]] = field(default_factory=dict)
    # (tenant id, hold shape) -> whether a hold of that shape may serve a request.
    claimable: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    kept: bool = False

    def start_command(self) -> None:
        self.kept = False

    def end_command(self, *, ok: bool) -> None:
        """After a command: keep the reads only if it succeeded and kept them exact."""
        if not (ok and self.kept):
            self.tenants.clear()
            self.claimable.clear()

    def add_running(self, tenant_id: str, *, online: bool, gpus: int) -> None:
        """The tenant runs `gpus` more (fewer, if negative) GPUs of one class."""
        state = self.tenants.get(tenant_id)
        if state is not None:
            row, queued, online_gpus, batch_gpus = state
            if online:
                online_gpus += gpus
            else:
                batch_gpus += gpus
            self.tenants[tenant_id] = (row, queued, online_gpus, batch_gpus)


class TransactionNotes(Protocol):
    """What a layer above noted during a write transaction, settled by the transaction's owner
    (`Database`) as the transaction ends: statements to run last (with the commit, in one round
    trip on PostgreSQL), then their rows once committed, or the rollback."""

    def last_statements(self, session: TxSession) -> list[tuple[str, Any]]: ...

    def after_commit(self, rows: list[list[Any]]) -> None: ...

    def after_rollback(self) -> None: ...


class TxSession(Session):
    """The session of one of our transactions. What the transaction notes is in these typed
    fields, read by `Database` where the transaction ends: no `session.info` keys and no
    listeners on the Session class."""

    def __init__(
        self, bind: Any, *, serialised: bool = False, cache: EpochCache, pipelines: bool = False
    ) -> None:
        super().__init__(bind, expire_on_commit=False)
        self.dialect: Dialect = bind.dialect
        # Writers take turns (SQLite's write lock, PostgreSQL's placement lock): placement
        # decisions are safe in this transaction.
        self.serialised = serialised
        # The database's cached placement view, which `notes` may adopt or drop at the end.
        self.view_cache = cache
        # Nodes whose assignments this transaction changed: told at once after the commit.
        self.touched_nodes: set[str] = set()
        self.notes: TransactionNotes | None = None
        # The cluster epoch read as the placement lock was taken (PostgreSQL), else None.
        self.epoch_at_start: int | None = None
        # (transaction, dialect, DB-API connection), found once per transaction.
        self._dbapi: tuple[Any, Dialect, Any] | None = None
        # Writes nobody reads a result of, held back to travel with the next statement in one
        # pipeline (PostgreSQL, where each statement is a round trip): (SQL, parameters, many).
        self._pipelines = pipelines
        self._deferred: list[tuple[str, Any, bool]] = []
        # A command of a batch on PostgreSQL has no savepoint: what it sent that may have
        # changed rows is counted instead, from `begin_command` on (writer's `_apply_pipelined`).
        self.command_changes = 0
        self._command_from = 0  # where the current command's held-back writes begin
        # On PostgreSQL the session sends BEGIN and COMMIT itself (the connection is in
        # autocommit mode), so that each travels with other statements; True once the
        # database has committed, whatever fails after.
        self.committed = False
        # Set by the group-commit writer for its batches only (None elsewhere).
        self.admissions: BatchAdmissions | None = None

    def raw(self) -> tuple[Dialect, Any]:
        """The dialect and DB-API connection of this transaction, found once per transaction
        (asking the session each time costs more than a SQLite statement)."""
        root = self.get_transaction()
        found = self._dbapi
        if found is not None and found[0] is root:
            return found[1], found[2]
        connection = super().connection()
        dbapi_connection = connection.connection.dbapi_connection
        self._dbapi = (self.get_transaction(), connection.dialect, dbapi_connection)
        return connection.dialect, dbapi_connection

    def run_raw(self, text: str, params: Any, *, many: bool = False) -> Any:
        """Execute SQL on the DB-API connection, after the deferred writes and in the same
        round trip; the cursor. Database errors (the deferred writes' too) come out as
        SQLAlchemy's: an IntegrityError from the unique index, an OperationalError from a
        lost server."""
        dialect, dbapi_connection = self.raw()
        cursor = dbapi_connection.cursor()
        # A try block and `_execute` written out, not a context manager and a call: this runs
        # for every hot statement.
        try:
            if self._deferred:
                with dbapi_connection.pipeline():
                    self._send_deferred(dbapi_connection)
                    _execute(cursor, text, params, many)
            elif many:
                cursor.executemany(text, params)
            elif params is None:
                cursor.execute(text)
            else:
                cursor.execute(text, params)
        except dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy_error(dialect, text, params, exc) from exc
        if cursor.rowcount and not text.startswith("SELECT"):
            self.command_changes += 1
        return cursor

    def run_raw_together(
        self, statements: list[tuple[str, Any]]
    ) -> list[tuple[list[str], list[Any]]]:
        """Execute several statements in order, after the deferred writes; with PostgreSQL in
        one round trip. Each one's column names and rows (fetched: SQLite makes an UPDATE's
        changes at its first row, so nothing waits on a later fetch)."""
        dialect, dbapi_connection = self.raw()
        cursors = [dbapi_connection.cursor() for _ in statements]
        try:
            if not self._pipelines:
                out = []
                for cursor, (text, params) in zip(cursors, statements, strict=True):
                    _execute(cursor, text, params, False)
                    out.append((_names(cursor), _rows(cursor)))
                return out
            self._pipeline(dbapi_connection, cursors, statements)
            return [(_names(c), _rows(c)) for c in cursors]
        except dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy_error(dialect, statements[0][0], None, exc) from exc

    def _pipeline(self, dbapi_connection: Any, cursors: list[Any], statements: list[Any]) -> None:
        """The deferred writes, then `statements` on `cursors`, in one round trip."""
        with dbapi_connection.pipeline():
            self._send_deferred(dbapi_connection)
            for cursor, (text, params) in zip(cursors, statements, strict=True):
                _execute(cursor, text, params, False)
        for cursor, (text, _) in zip(cursors, statements, strict=True):
            if cursor.rowcount and not text.startswith("SELECT"):
                self.command_changes += 1

    def start(self) -> None:
        """Begin the transaction. On SQLite, take the connection (and the write lock) now. On
        PostgreSQL, BEGIN is held back to travel with the first statement: a snapshot starts
        at the first statement anyway, and psycopg's own BEGIN was a round trip alone."""
        if self._pipelines:
            self.raw()
            self._deferred.append(("BEGIN", None, False))
        else:
            self.connection()

    def commit_with(self, statements: list[tuple[str, Any]]) -> list[list[Any]]:
        """Run the last statements and commit; their rows. On PostgreSQL the held-back writes,
        these statements and COMMIT go in one round trip; on SQLite the session's owner commits
        after this, as SQLAlchemy does."""
        if not self._pipelines:
            return [rows for _, rows in self.run_raw_together(statements)] if statements else []
        dialect, dbapi_connection = self.raw()
        statements = [*statements, ("COMMIT", None)]
        cursors = [dbapi_connection.cursor() for _ in statements]
        try:
            self._pipeline(dbapi_connection, cursors, statements)
            # PostgreSQL answers COMMIT in a failed transaction with ROLLBACK, not an error:
            # only COMMIT's own answer says that the changes stand.
            if cursors[-1].statusmessage != "COMMIT":
                raise dialect.loaded_dbapi.OperationalError(
                    f"the transaction was rolled back ({cursors[-1].statusmessage})"
                )
            rows = [_rows(c) for c in cursors[:-1]]
        except dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy_error(dialect, "COMMIT", None, exc) from exc
        self.committed = True
        return rows

    def defer_raw(self, text: str, params: Any, *, many: bool = False) -> None:
        """A write whose result nobody reads: with PostgreSQL it is sent with the next
        statement of this session (any: ours, the ORM's, the commit's), else at once."""
        if self._pipelines:
            self._deferred.append((text, params, many))
        else:
            self.run_raw(text, params, many=many)

    def send_deferred(self) -> None:
        """Send the deferred writes now, in one round trip."""
        if self._deferred:
            dialect, dbapi_connection = self.raw()
            text = self._deferred[0][0]
            try:
                with dbapi_connection.pipeline():
                    self._send_deferred(dbapi_connection)
            except dialect.loaded_dbapi.Error as exc:
                raise as_sqlalchemy_error(dialect, text, None, exc) from exc

    @property
    def pipelines(self) -> bool:
        """Whether writes are held back to travel with the next statement (PostgreSQL)."""
        return self._pipelines

    def begin_command(self) -> None:
        """A command of a batch starts: count what it changes from here on."""
        self.command_changes = 0
        self._command_from = len(self._deferred)

    def drop_command_writes(self) -> None:
        """Forget the current command's held-back writes (it failed before any was sent);
        earlier commands' still held back stay."""
        del self._deferred[self._command_from :]

    def _send_deferred(self, dbapi_connection: Any) -> None:
        pending, self._deferred = self._deferred, []
        self.command_changes += max(0, len(pending) - self._command_from)
        self._command_from = 0
        cursor = dbapi_connection.cursor()
        for text, params, many in pending:
            _execute(cursor, text, params, many)

    # Every other statement of the session goes after the deferred writes: the ORM's queries
    # and lazy loads (`_execute_internal`), its unit of work (`flush`) and Core statements on
    # `connection()`. tests/control_plane/test_deferred_writes.py holds SQLAlchemy to this.

    # Each also counts toward `command_changes` when it may change rows: a statement that is
    # not a SELECT, a flush with something to flush, and any use of `connection()`.

    def _execute_internal(self, *args: Any, **kwargs: Any) -> Any:
        if self._deferred:
            self.send_deferred()
        statement = args[0] if args else kwargs.get("statement")
        if not getattr(statement, "is_select", False):
            self.command_changes += 1
        return super()._execute_internal(*args, **kwargs)

    def flush(self, objects: Any = None) -> None:
        # `_is_clean` is what Session.flush itself asks: a clean session sends nothing.
        if not self._is_clean():
            self.command_changes += 1
            if self._deferred:
                self.send_deferred()
        super().flush(objects)

    def connection(self, *args: Any, **kwargs: Any) -> Any:
        connection = super().connection(*args, **kwargs)
        self.command_changes += 1
        if self._deferred:
            self.send_deferred()
        return connection


def as_sqlalchemy_error(dialect: Dialect, text: str, params: Any, exc: Exception) -> Exception:
    return DBAPIError.instance(text, params, exc, dialect.loaded_dbapi.Error, dialect=dialect)


def _names(cursor: Any) -> list[str]:
    return [d[0] for d in cursor.description or ()]


def _rows(cursor: Any) -> list[Any]:
    # A statement that returns no rows (COMMIT, an UPDATE without RETURNING) has nothing to
    # fetch; psycopg raises if asked.
    return cursor.fetchall() if cursor.description is not None else []


def _execute(cursor: Any, text: str, params: Any, many: bool) -> None:
    if many:
        cursor.executemany(text, params)
    elif params is None:
        cursor.execute(text)
    else:
        cursor.execute(text, params)


def touch_nodes(session: Session, node_ids: Iterable[str]) -> None:
    """Note that these nodes' assignments change: after the commit, they are told at once."""
    if not isinstance(session, TxSession):
        raise TypeError("touch_nodes needs a session of Database.write")
    session.touched_nodes.update(node_ids)


class RawReadSession(TxSession):
    """A read transaction begun and ended on the DB-API connection itself: for prebuilt
    statements only (`sql.run`, `sql.row`). The event loop reads every heartbeat in one, and
    SQLAlchemy's session and connection transactions cost more than the reads they wrap.
    One is kept per kept-open loop connection and used for one transaction at a time; an
    ORM call on it fails (SQLite refuses a second BEGIN) rather than reading outside it."""

    def __init__(self, bind: Any, *, cache: EpochCache) -> None:
        super().__init__(bind, cache=cache)
        self._driver = bind.connection.driver_connection

    def raw(self) -> tuple[Dialect, Any]:
        return self.dialect, self._driver

    def run_bare(self, statement: str) -> None:
        """BEGIN, COMMIT or ROLLBACK, as SQLAlchemy would raise its errors (a busy file:
        OperationalError)."""
        try:
            self._driver.execute(statement)
        except self.dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy_error(self.dialect, statement, None, exc) from exc
