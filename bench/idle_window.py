"""The idle budget's check on a new hold, for a tenant that ran many jobs in the window.

    .venv/bin/python bench/idle_window.py [--jobs 20000 100000] [--runs 5]

Every new hold of a tenant with an `idle_budget` sums the tenant's idle and busy GPU-seconds
over the last 24 hours, inside the writer's batch. This fills a SQLite file with `--jobs`
one-minute allocations spread over the window (and as many finished before it, which the
check must skip) and times `tenant_idle_usage`, the median of `--runs`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from machine import describe
from sqlalchemy import insert

from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.db.models import AllocationRow, TenantRow
from control_plane.services.idle_usage import tenant_idle_usage

NOW = 10_000_000.0
DAY = 86_400.0


def fill(db: Database, jobs: int) -> None:
    """`jobs` one-minute allocations in the last day, and as many on the day before."""
    with db.write() as session:
        session.add(TenantRow(id="busy", name="busy", quota_gpus=8, created_at=0.0))
        session.flush()
        for day, prefix in ((0.0, "in"), (DAY, "old")):
            rows = [
                {
                    "id": f"{prefix}{i}",
                    "tenant_id": "busy",
                    "status": "released",
                    "gpu_count": 1,
                    "requested_at": (at := NOW - day - DAY + i * DAY / jobs),
                    "allocated_at": at,
                    "released_at": at + 60.0,
                    "strategy": "pack",
                    "job_class": "batch",
                }
                for i in range(jobs)
            ]
            session.connection().execute(insert(AllocationRow.__table__), rows)


def timed(db: Database, runs: int) -> float:
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        with db.read() as session:
            tenant_idle_usage(session, "busy", NOW)
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {describe()}")
    for jobs in args.jobs:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(f"sqlite:///{Path(tmp) / 'idle.db'}")
            upgrade(db)
            fill(db, jobs)
            median = timed(db, args.runs)
            db.dispose()
        print(f"{jobs:,} jobs in the window (+{jobs:,} before it): {median * 1000:.1f} ms")


if __name__ == "__main__":
    main()
