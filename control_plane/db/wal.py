"""Checkpoints of SQLite's write-ahead log: on a thread of their own, never inside a commit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy import Engine

log = logging.getLogger(__name__)

# Commits of this process between two checkpoints. SQLite's own threshold is 1,000 pages; a
# batch of the group-commit writer writes a few dozen, and a checkpoint costs 20-40 ms of
# disk work on a busy file, so this keeps the log to tens of megabytes at full load.
CHECKPOINT_EVERY = 200
# Seconds after which a commit starts one anyway: a flush of many nodes' telemetry writes
# hundreds of pages in one commit, and 200 of those would be a log of a hundred megabytes.
CHECKPOINT_AFTER_S = 1.0
# Passes beside the writers before the last one, which holds them back: each copies what was
# appended during the one before, so the last one's pages (and the writers' wait) are few.
CATCH_UP_PASSES = 3
# Frames appended during a pass that are few enough to copy with the writers held back (an
# fsync of 64 scattered pages takes about 2 ms on the benchmark machine).
FEW_FRAMES = 64


class WalCheckpointer:
    """Copies the write-ahead log back into the database file every `every` commits, or at
    the first commit `after_s` seconds after the last checkpoint.

    SQLite's automatic checkpoint runs inside the commit that crosses 1,000 pages, so the
    writer that commits holds the process's write mutex through the whole copy and its
    fsync: every other writer, the event loop's included, waits 20-40 ms, and longer as the
    file grows (measured in BENCHMARKS.md). Every connection turns it off
    (`wal_autocheckpoint=0`); this runs a PASSIVE checkpoint (it waits for no reader or
    writer) after the commit, on its own thread, one at a time.

    A checkpoint beside busy writers never catches up: they append while it copies, and the
    log starts over from its beginning only once all of it has been copied. So passes beside
    the writers copy what was appended during the pass before, until that is few frames, and
    a last pass copies the rest with `write_mutex` held: this process's writers wait for a
    few pages and one fsync, not the whole log.
    """

    def __init__(
        self,
        engine: Engine,
        write_mutex: threading.Lock,
        *,
        every: int = CHECKPOINT_EVERY,
        after_s: float = CHECKPOINT_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._write_mutex = write_mutex
        self._every = every
        self._after_s = after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._commits = 0  # since the last checkpoint started
        self._started_at = clock()
        self._pending: Future[None] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def committed(self) -> None:
        """Count one commit, and start a checkpoint if one is due and none is running."""
        with self._lock:
            self._commits += 1
            now = self._clock()
            due = self._commits >= self._every or now - self._started_at >= self._after_s
            if not due or (self._pending and not self._pending.done()):
                return
            self._commits, self._started_at = 0, now
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="wal-checkpoint")
            self._pending = self._pool.submit(self._run_logged)

    def run(self) -> None:
        """One checkpoint now, on the caller's thread (not one holding the write mutex)."""
        with self._engine.connect() as connection:

            def passive() -> int:
                """One pass; how many frames the log had when it began."""
                row = connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                return int(row[1]) if row else 0

            frames = passive()
            for _ in range(CATCH_UP_PASSES):
                before, frames = frames, passive()
                if frames < before:  # the log started over: nothing is left behind
                    return
                if frames - before <= FEW_FRAMES:
                    break
            with self._write_mutex:
                passive()

    def wait(self) -> None:
        """Until the checkpoint started last (if any) has finished."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            pending.result()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception:  # the next one will try again
            log.warning("write-ahead log checkpoint failed", exc_info=True)
