"""Allocate+release held for minutes on one database: does the rate hold as history grows?

    .venv/bin/python bench/alloc_sustained.py --db postgresql --windows 12

`alloc_throughput.py` measures a fresh database for seconds. A real control plane's tables keep
every past allocation, assignment and event, and PostgreSQL plans a statement it has prepared
once for all values: a read that is fast on an empty table can read the whole history on every
request. This keeps one server and database for `--windows` windows of allocate+release under
wrk, back to back, and prints each window's rate, latency and the rows of history so far. What a
window leaves allocated (wrk stops between a POST and its DELETE) is released before the next,
so each window starts from the same free cluster.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from alloc_throughput import ADMIN, UNLIMITED, prepare, require_wrk, run_wrk
from machine import describe

from tests.support.pg import TempPostgres
from tests.support.procs import ServerProc


def release_left(server: ServerProc, key: str) -> int:
    """Release what a window left allocated; how many."""
    with server.admin() as admin:
        admin.headers["Authorization"] = f"Bearer {key}"
        found = admin.get("/v1/allocations", params={"status": "allocated", "limit": 1000})
        found.raise_for_status()
        items = found.json()
        for alloc in items:
            admin.delete(f"/v1/allocations/{alloc['id']}").raise_for_status()
    return len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=16)
    args = parser.parse_args()
    require_wrk()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-sustained-"))
    pg = TempPostgres(fsync=True).start() if args.db == "postgresql" else None
    url = pg.url(pg.create_database()) if pg else f"sqlite:///{tmp / 'bench.db'}"
    env = {"JITGPU_LOG_LEVEL": "warning", "JITGPU_HEARTBEAT_TIMEOUT_S": "3600", **UNLIMITED}
    server = ServerProc(tmp, database_url=url, admin_token=ADMIN, env=env).start()
    rates = []
    made = 0
    print(f"machine: {describe()}; database: {args.db}")
    try:
        server.wait_ready()
        key = prepare(server, args.nodes)
        for n in range(args.windows):
            result = run_wrk(
                server.url, key, seconds=args.seconds, connections=args.connections, threads=1
            )
            if result["errors"]:
                raise SystemExit(f"window {n + 1}: {result['errors']} requests failed")
            made += result["requests"] // 2
            left = release_left(server, key)
            rates.append(result["allocations_per_s"])
            print(
                f"window {n + 1:2d}: {result['allocations_per_s']:4.0f} allocations/s, p99 "
                f"{result['p99_ms']:6.1f} ms; about {made:,} allocations in the history "
                f"({left} left allocated, released)",
                flush=True,
            )
    finally:
        server.stop()
        if pg:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    third = max(1, len(rates) // 3)
    first, last = statistics.median(rates[:third]), statistics.median(rates[-third:])
    print(
        f"first {third} windows {first:.0f}/s, last {third} windows {last:.0f}/s "
        f"({last / first - 1:+.0%}); median of all {statistics.median(rates):.0f}/s"
    )


if __name__ == "__main__":
    main()
