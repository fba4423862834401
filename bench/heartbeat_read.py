"""A node's heartbeat read on PostgreSQL: one folded statement against the same reads sent one
by one in a pipeline, in CPU per read of the client and of the PostgreSQL backend.

    .venv/bin/python bench/heartbeat_read.py

A throwaway PostgreSQL (loopback, fsync off: nothing is written) holds 1,250 nodes of 8 GPUs
and 30,000 allocations of history, 16 of them running. Each form reads 2,000 heartbeats of
nodes in turn on its own async connection, as the server's event loop does: the folded
statement (`db/loopreads.py`, what the server sends, planned once for every node as the
server's loop reader does) and, as the code before it did, BEGIN (repeatable read), the six
reads and COMMIT in one pipeline. The two forms take turns, twice.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from machine import describe

from control_plane.db.engine import Database
from control_plane.db.loopreads import GENERIC_PLANS, folded
from control_plane.db.migrate import upgrade
from control_plane.services import beatread
from tests.support.pg import TempPostgres

READS = 2000
NODES = 1250
_TICK = os.sysconf("SC_CLK_TCK")


def backend_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def fill(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            "INSERT INTO tenant (id, name, quota_gpus, burst_gpus, weight, created_at,"
            " max_held_gpus, max_idle_gpu_hours_per_day, max_hold_ttl_s,"
            " holds_may_preempt_holds, usage_gpu_s, usage_at)"
            " VALUES ('t', 't', 64, 0, 1, 0, 8, 8, 3600, false, 0, 0)"
        )
        c.execute(
            "INSERT INTO node (id, name, spine, leaf, status, registered_at) SELECT 'n' || i,"
            " 'n' || i, 's', 'l', 'online', 0 FROM generate_series(1, %s) i",
            (NODES,),
        )
        c.execute(
            "INSERT INTO gpu (uuid, node_id, model, memory_mb, healthy, present) SELECT"
            " 'g' || i || '-' || j, 'n' || i, 'A100', 81920, true, true"
            " FROM generate_series(1, %s) i, generate_series(0, 7) j",
            (NODES,),
        )
        c.execute(
            "INSERT INTO allocation (id, tenant_id, status, gpu_count, warm, requested_at,"
            " strategy, job_class) SELECT 'a' || i, 't', CASE WHEN i <= 16 THEN 'allocated'"
            " ELSE 'released' END, 1, false, i, 'pack', 'batch' FROM generate_series(1, 30000) i"
        )
        c.execute(
            "INSERT INTO assignment (gpu_uuid, node_id, allocation_id, started_at, ended_at)"
            " SELECT 'g' || (1 + i %% %s) || '-0', 'n' || (1 + i %% %s), 'a' || i, i,"
            " CASE WHEN i <= 16 THEN NULL ELSE i END FROM generate_series(1, 30000) i",
            (NODES, NODES),
        )
        c.execute("ANALYZE")


async def measure(url: str, dialect: Any) -> dict[str, list[tuple[float, float]]]:
    reads = beatread.reads(None)
    each = [r.compile(dialect=dialect) for r, _ in reads]
    each_sql = [(c.string, {k: v for k, v in c.params.items() if v is not None}) for c in each]
    one = folded(reads).compile(dialect=dialect)
    one_sql = one.string, {k: v for k, v in one.params.items() if v is not None}
    a = await psycopg.AsyncConnection.connect(url, autocommit=True)
    b = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await b.execute(GENERIC_PLANS)  # as the server's loop reader does

    async def pipelined(node: str) -> None:
        cursors = [a.cursor() for _ in range(len(each_sql) + 2)]
        async with a.pipeline():
            await cursors[0].execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for cursor, (text, literals) in zip(cursors[1:-1], each_sql, strict=True):
                await cursor.execute(text, {**literals, "node": node})
            await cursors[-1].execute("COMMIT")
        for cursor in cursors[1:-1]:
            await cursor.fetchall()

    async def one_statement(node: str) -> None:
        cursor = b.cursor()
        await cursor.execute(one_sql[0], {**one_sql[1], "node": node})
        await cursor.fetchone()

    forms: list[tuple[str, Callable[[str], Awaitable[None]], psycopg.AsyncConnection]] = [
        ("seven statements in a pipeline", pipelined, a),
        ("one folded statement", one_statement, b),
    ]
    found: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in forms}
    for name, read, conn in forms * 2:
        pid = conn.info.backend_pid
        for n in range(20):  # past psycopg's prepare threshold
            await read(f"n{1 + n}")
        client, backend = time.process_time(), backend_seconds(pid)
        for n in range(READS):
            await read(f"n{1 + n % NODES}")
        found[name].append(
            (
                1e6 * (time.process_time() - client) / READS,
                1e6 * (backend_seconds(pid) - backend) / READS,
            )
        )
    await a.close()
    await b.close()
    return found


def main() -> None:
    pg = TempPostgres().start()
    try:
        name = pg.create_database()
        db = Database(pg.url(name))
        upgrade(db)
        url = pg.url(name).replace("postgresql+psycopg", "postgresql")
        fill(url)
        found = asyncio.run(measure(url, db.engine.dialect))
        db.dispose()
    finally:
        pg.stop()
    print(f"machine: {describe()}")
    for name, runs in found.items():
        client = statistics.median(c for c, _ in runs)
        backend = statistics.median(s for _, s in runs)
        print(
            f"{name}: client {client:.0f} us, PostgreSQL backend {backend:.0f} us of CPU per "
            f"heartbeat read (median of {len(runs)} x {READS} reads)"
        )


if __name__ == "__main__":
    main()
