"""Several servers starting at once on one fresh SQLite file all migrate it, one at a time."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from control_plane.db.engine import Database
from control_plane.db.migrate import current_revision, head_revision, upgrade

PROCESSES = 8


def _migrate(
    url: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue
) -> None:
    db = Database(url)
    barrier.wait(timeout=30)  # all at once, as replicas started together would
    try:
        upgrade(db)
        out.put("ok")
    except Exception as exc:  # reported to the test, which names it
        out.put(f"{type(exc).__name__}: {exc}")
    finally:
        db.dispose()


def test_processes_migrating_one_fresh_sqlite_file_together_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jitgpu.db'}"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [ctx.Process(target=_migrate, args=(url, barrier, out)) for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    # Without a lock, SQLite answers the others' schema changes with "database is locked".
    assert results == ["ok"] * PROCESSES
    db = Database(url)
    try:
        assert current_revision(db) == head_revision()
    finally:
        db.dispose()
