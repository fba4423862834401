"""One control-plane replica against two, on one database: allocate+release under wrk.

    .venv/bin/python bench/replicas.py --runs 3
    .venv/bin/python bench/replicas.py --runs 3 --db sqlite

The same PostgreSQL (fsync on) serves one `jitgpu server`, then two; wrk drives 16
connections in all (split evenly between the replicas). Prints allocations/s and the worst
replica's p99 latency, median of the runs. With `--db sqlite` the servers share one SQLite
file instead (supported, with a warning: SQLite is the single-replica default), which shows
what a second process on one file is worth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from contextlib import nullcontext
from pathlib import Path

from alloc_throughput import ADMIN, prepare, require_wrk
from machine import REPO, describe

from tests.support.pg import TempPostgres
from tests.support.procs import ServerProc


def wrk(url: str, token: str, *, seconds: int, connections: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(REPO / "bench" / "alloc_release.lua"),
            url,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "JITGPU_BENCH_TOKEN": token},
    )


def result(proc: subprocess.Popen[str]) -> dict:
    out, _ = proc.communicate()
    return json.loads(next(x for x in out.splitlines() if x.startswith("JSON "))[5:])


def one_run(pg: TempPostgres | None, replicas: int, args: argparse.Namespace, tmp: Path) -> dict:
    for old in tmp.glob("replicas.db*"):
        old.unlink()
    url = pg.url(pg.create_database()) if pg else f"sqlite:///{tmp / 'replicas.db'}"
    env = {"JITGPU_LOG_LEVEL": "warning"}
    servers = [
        ServerProc(
            tmp, database_url=url, admin_token=ADMIN, env=env, name=f"r{replicas}-{i}"
        ).start()
        for i in range(replicas)
    ]
    try:
        for s in servers:
            s.wait_ready()
        token = prepare(servers[0], args.nodes)
        per = args.connections // replicas
        for proc in [wrk(s.url, token, seconds=2, connections=per) for s in servers]:
            result(proc)  # warm-up
        outs = [
            result(p)
            for p in [wrk(s.url, token, seconds=args.seconds, connections=per) for s in servers]
        ]
    finally:
        for s in servers:
            s.stop()
    requests = sum(o["requests"] for o in outs)
    seconds = max(o["seconds"] for o in outs)
    return {
        "allocations_per_s": requests / seconds / 2,
        "p99_ms": max(o["p99_ms"] for o in outs),
        "errors": sum(o["errors"] for o in outs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=16)
    args = parser.parse_args()
    require_wrk()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-replicas-"))
    print(f"machine: {describe()}")
    with TempPostgres(fsync=True) if args.db == "postgresql" else nullcontext() as pg:
        for replicas in (1, 2):
            runs = [one_run(pg, replicas, args, tmp) for _ in range(args.runs)]
            rate = statistics.median(r["allocations_per_s"] for r in runs)
            p99 = statistics.median(r["p99_ms"] for r in runs)
            errors = sum(r["errors"] for r in runs)
            label = "PostgreSQL" if pg else "SQLite (one file)"
            print(
                f"{label}, {replicas} replica(s): {rate:.0f} allocations/s, p99 "
                f"{p99:.1f} ms; median of {args.runs} runs x {args.seconds}s, "
                f"{args.connections} connections, errors {errors}"
            )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
