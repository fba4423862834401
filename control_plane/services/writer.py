"""One writer with group commit: the hot write commands of many requests share one transaction.

Requests build a `Command` and wait for its answer; one writer owns the writing. It takes
every command waiting (up to `max_batch`), applies each in a SAVEPOINT of one transaction, so
that a command that fails is undone alone, commits once, and answers the whole batch only
after that commit. On a local SQLite file whose commits do not wait on the disk the writer is
the event loop itself (the commands of one turn of the loop make a batch, applied at its
end); elsewhere, and for a batch that finds another writer holding the file for long, it is a
thread of its own. A batch whose commit fails is run again command by command, each in its
own transaction, so one bad command cannot fail its neighbours. Idempotency rows are written
in the command's savepoint, with its effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlmodel import Session

from control_plane.db.engine import Database, WriteWouldWait
from control_plane.db.session import BatchAdmissions, TxSession
from control_plane.services import idempotency, placing, sql
from control_plane.services.idempotency import UseCase

log = logging.getLogger(__name__)

# Enough to fill a commit under load; small enough that one batch's answers are not held long.
MAX_BATCH = 64
# How the loop waits for another writer to finish: a turn every millisecond, for a second.
LOOP_WAIT_S = 0.001
LOOP_WAIT_TURNS = 1000


T = TypeVar("T")


def _no_use_case(session: Session, now: float) -> Any:
    raise AssertionError("a command from a thread runs its own work")


@dataclass(frozen=True)
class Command:
    """One request's write: its use case, its idempotency key, and the future it waits on."""

    use_case: UseCase
    owner: str = ""
    key: str | None = None
    digest: str = ""
    answer: Future[Any] = field(default_factory=Future)
    # Work queued from another thread (`GroupWriter.run_from_thread`: a periodic job, a
    # heartbeat's change, a telemetry flush), run as it is and answered with its own result;
    # it brings its own `now`.
    work: Callable[[Session], Any] | None = None
    # Set by `call`: the event loop's own future, settled from `answer` with the rest of the
    # batch in one hand-over to the loop (a wake-up per command cost more than its write).
    waiter: asyncio.Future[tuple[int, str]] | None = None


class _Alone:
    """A command to run again in its own transaction (a concurrent twin won its key)."""


_ALONE = _Alone()
_Result = Any  # (status, JSON text), a work's result, the exception raised, or _ALONE
_STOP = object()


class GroupWriter:
    """The single writer of one database's hot commands; a daemon thread started on first use."""

    def __init__(
        self, db: Database, clock: Callable[[], float], *, max_batch: int = MAX_BATCH
    ) -> None:
        self._db = db
        self._clock = clock
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._on_loop: list[Command] = []
        self._loop_scheduled = False
        self._loop_waits = 0  # turns in a row the loop found another writer
        self.batches = 0  # committed batches, for tests and the benchmark's notes
        self.commands = 0

    async def call(
        self,
        *,
        use_case: UseCase,
        owner: str = "",
        key: str | None = None,
        fingerprint: Callable[[], str] = str,
    ) -> tuple[int, str]:
        """Queue the command and await its answer: (status, JSON text) once committed, or the
        exception the use case raised (its savepoint undone). The event loop serves other
        requests meanwhile."""
        idempotency.check_key(key)
        digest = fingerprint() if key is not None else ""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        command = Command(use_case=use_case, owner=owner, key=key, digest=digest, waiter=waiter)
        if self._db.loop_writes:
            # The commands of one turn of the loop make one batch, applied at its end.
            self._on_loop.append(command)
            if not self._loop_scheduled:
                self._loop_scheduled = True
                loop.call_soon(self._run_on_loop)
        else:
            self._to_thread([command])
        return await waiter

    def run_from_thread(self, work: Callable[[Session], T]) -> T:
        """Run `work` as a command of this writer and wait for its result, from a thread other
        than the event loop's: a periodic job, a heartbeat that changes state, a telemetry
        flush. It takes its turn on the writer thread, in a savepoint of whatever batch it
        joins, and is answered after that commit; work that fails is undone alone and raises
        here."""
        command = Command(use_case=_no_use_case, work=work)
        self._to_thread([command])
        return command.answer.result()

    def _to_thread(self, commands: list[Command]) -> None:
        if commands:
            self._ensure_started()
            for command in commands:
                self._queue.put(command)

    def _run_on_loop(self) -> None:
        """The commands of one turn of the event loop, in batches on the loop's own thread
        (`Database.loop_writes`): no batch hands the interpreter lock to and from a writer
        thread for each of its statements. Whatever cannot be written here without waiting
        (another writer holds the file) or fails as a batch goes to the writer thread."""
        self._loop_scheduled = False
        while self._on_loop:
            batch = self._on_loop[: self._max_batch]
            try:
                self._apply_on_loop(batch)
            except WriteWouldWait:
                # Another writer (the heartbeat flush, a periodic job, another process) holds
                # the file for a moment: try again shortly, keeping the batch's place. Past
                # about a second of that, the writer thread takes the batch and waits its turn.
                self._loop_waits += 1
                if self._loop_waits < LOOP_WAIT_TURNS:
                    self._loop_scheduled = True
                    asyncio.get_running_loop().call_later(LOOP_WAIT_S, self._run_on_loop)
                    return
                self._to_thread(batch)
            except BaseException as exc:
                _fail_unanswered(batch, exc)
                _settle(batch)
            self._loop_waits = 0
            del self._on_loop[: len(batch)]

    def _apply_on_loop(self, commands: list[Command]) -> None:
        """One batch in a transaction on the loop's thread; raises WriteWouldWait, with
        nothing done, if another writer holds the database."""
        results: list[_Result] = []
        try:
            with self._db.loop_write() as session:
                for command in commands:
                    results.append(self._apply_one(session, command))
        except WriteWouldWait:
            raise
        except Exception as exc:
            log.warning(
                "group commit of %d commands failed (%s); on the writer thread", len(commands), exc
            )
            self._to_thread(commands)
            return
        alone = self._answer(commands, results)
        self._to_thread(alone)
        _settle([c for c in commands if c.answer.done()])

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="jitgpu-writer", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self, timeout: float = 10.0) -> None:
        """Finish what is queued, then end the thread (a later command starts it again)."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            # Whatever arrived while the last batch committed joins this one.
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)  # seen again once this batch is answered
                    break
                batch.append(more)
            commands = [c for c in batch if isinstance(c, Command)]
            try:
                self.apply_batch(commands)
            except BaseException as exc:
                _fail_unanswered(commands, exc)
            finally:
                _hand_over(commands)

    def apply_batch(self, commands: list[Command]) -> None:
        """Apply, commit once, then answer; on a failed transaction, one by one."""
        results: list[_Result] = []
        try:
            with self._db.write(placement=True) as session:
                for command in commands:
                    results.append(self._apply_one(session, command))
        except Exception as exc:
            # One command alone gets its error, unless a twin (another replica) may have
            # stored its key first: alone, it reads the twin's answer.
            if len(commands) == 1 and not isinstance(exc, IntegrityError):
                commands[0].answer.set_exception(exc)
                return
            log.warning("group commit of %d commands failed (%s); one by one", len(commands), exc)
            for command in commands:
                self._alone(command)
            return
        for command in self._answer(commands, results):
            self._alone(command)

    def _answer(self, commands: list[Command], results: list[_Result]) -> list[Command]:
        """Answer a committed batch's commands; those to run again alone, unanswered."""
        self.batches += 1
        self.commands += len(commands)
        alone = []
        # Answered only now, after the commit: an acknowledged command is durable.
        for command, result in zip(commands, results, strict=True):
            if isinstance(result, _Alone):
                alone.append(command)
            elif isinstance(result, BaseException):
                command.answer.set_exception(result)
            else:
                command.answer.set_result(result)
        return alone

    def _apply_one(self, session: Session, command: Command) -> _Result:
        """One command of the batch: its answer, or the exception it raised with its changes
        undone. The batch's admission reads (`BatchAdmissions`) outlive it only if it
        succeeded and kept them exact."""
        session.flush()
        tx = sql.command_session(session)
        if tx.admissions is None:
            tx.admissions = BatchAdmissions()
        tx.admissions.start_command()
        result = self._apply_in(session, tx, command)
        tx.admissions.end_command(ok=not isinstance(result, BaseException | _Alone))
        return result

    def _apply_in(self, session: Session, tx: TxSession, command: Command) -> _Result:
        """The command itself.

        On SQLite each command runs in a SAVEPOINT, taken on the connection, not through the
        ORM's nested transaction, whose bookkeeping cost more than the command's own
        statements. The ORM is kept in step by hand: its changes are flushed before the
        savepoint and before its release, and after a rollback to it every ORM object is
        dropped from the session (the next command loads what it needs as the rows now are)
        along with the placement view.

        On PostgreSQL a savepoint and its release were two of a command's seven statements,
        so a command has none (`_apply_pipelined`).
        """
        if tx.pipelines:
            return self._apply_pipelined(session, tx, command)
        sql.savepoint(session, "SAVEPOINT")
        try:
            result = self._run(session, command)
            session.flush()
            sql.savepoint(session, "RELEASE SAVEPOINT")
        except Exception as exc:
            sql.undo_command(session)
            session.expunge_all()
            placing.drop_view(session)
            # A concurrent twin (another replica) stored the key first: run it again alone,
            # where it reads the twin's answer.
            return _ALONE if isinstance(exc, IntegrityError) else exc
        return result

    def _apply_pipelined(self, session: Session, tx: TxSession, command: Command) -> _Result:
        """A command on PostgreSQL, without a savepoint. Its writes are held back to travel
        with a later statement, and the session counts what it sent that may have changed
        rows (`TxSession.command_changes`). A command that fails having changed nothing (a
        404, a 429: they fail on their reads) drops its held-back writes and is answered
        with its error. One that fails after changing rows, or with a database error (which
        may belong to an earlier command's held-back writes), fails the whole batch, which
        the writer runs again command by command, each in its own transaction."""
        tx.begin_command()
        try:
            result = self._run(session, command)
            session.flush()
        except DBAPIError:
            raise
        except Exception as exc:
            if tx.command_changes:
                raise
            tx.drop_command_writes()
            session.expunge_all()
            placing.drop_view(session)
            return exc
        return result

    def _run(self, session: Session, command: Command) -> Any:
        if command.work is not None:
            return command.work(session)
        return idempotency.apply(
            session,
            owner=command.owner,
            key=command.key,
            digest=command.digest,
            clock=self._clock,
            use_case=command.use_case,
        )

    def _alone(self, command: Command) -> None:
        try:
            if command.work is not None:
                with self._db.write(placement=True) as session:
                    result = command.work(session)
            else:
                result = idempotency.run_digested(
                    self._db,
                    owner=command.owner,
                    key=command.key,
                    digest=command.digest,
                    clock=self._clock,
                    use_case=command.use_case,
                )
        except Exception as exc:
            command.answer.set_exception(exc)
        else:
            command.answer.set_result(result)


def _fail_unanswered(commands: list[Command], exc: BaseException) -> None:
    """A batch failed outside any command: never leave a request waiting for ever."""
    log.exception("writer batch failed", exc_info=exc)
    for command in commands:
        if not command.answer.done():
            command.answer.set_exception(exc)


def _hand_over(commands: list[Command]) -> None:
    """Settle the waiting requests' futures from their answers: one call into each event
    loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Command]] = {}
    for command in commands:
        if command.waiter is not None:
            by_loop.setdefault(command.waiter.get_loop(), []).append(command)
    for loop, waiting in by_loop.items():
        # A loop already closed has nobody left waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, waiting)


def _settle(commands: list[Command]) -> None:
    for command in commands:
        waiter = command.waiter
        if waiter is None or waiter.done():  # the request went away meanwhile
            continue
        if not command.answer.done():  # never so (every path answers); never block the loop
            waiter.set_exception(RuntimeError("the writer gave this command no answer"))
            continue
        error = command.answer.exception()
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(command.answer.result())
