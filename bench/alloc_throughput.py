"""REST allocate+release throughput with durable commits, under wrk, on SQLite or PostgreSQL.

    .venv/bin/python bench/alloc_throughput.py --db sqlite --runs 3
    .venv/bin/python bench/alloc_throughput.py --db postgresql --runs 3

Each wrk connection alternates POST /v1/allocations (1 GPU) and DELETE of what it got, so one
allocation is two committed transactions. Prints the median over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from machine import REPO, describe

from tests.support.pg import TempPostgres
from tests.support.procs import ServerProc

ADMIN = "bench-admin-token-0123456789"
# One tenant makes all the load, past the default per-tenant rate limit (1,000 requests/s,
# which would cap this benchmark at 500 allocations/s): the limit stays on (its cost is
# measured) with a rate no run reaches.
UNLIMITED = {"JITGPU_TENANT_RATE_PER_S": "1000000", "JITGPU_TENANT_BURST": "1000000"}


def prepare(server: ServerProc, nodes: int) -> str:
    with server.admin() as admin:
        for n in range(nodes):
            body = {
                "name": f"n{n}",
                "leaf": f"leaf{n // 4}",
                "gpus": [
                    {"uuid": f"GPU-{n}-{i}", "model": "A100", "memory_mb": 81920, "index": i}
                    for i in range(8)
                ],
            }
            admin.post("/v1/nodes", json=body).raise_for_status()
        tenant = admin.post("/v1/tenants", json={"name": "bench", "quota_gpus": nodes * 8})
        tenant.raise_for_status()
        key = admin.post(f"/v1/tenants/{tenant.json()['id']}/api-keys")
        key.raise_for_status()
        return key.json()["key"]


def run_wrk(url: str, token: str, *, seconds: int, connections: int, threads: int) -> dict:
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(REPO / "bench" / "alloc_release.lua"),
            url,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "JITGPU_BENCH_TOKEN": token},
        check=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("JSON "))
    result = json.loads(line[5:])
    result["requests_per_s"] = result["requests"] / result["seconds"]
    result["allocations_per_s"] = result["requests_per_s"] / 2
    return result


def one_run(db: str, args: argparse.Namespace, tmp: Path, pg: TempPostgres | None) -> dict:
    url = pg.url(pg.create_database()) if pg else f"sqlite:///{tmp / 'bench.db'}"
    env = {
        "JITGPU_LOG_LEVEL": "warning",
        "JITGPU_SQLITE_SYNCHRONOUS": args.synchronous,
        **UNLIMITED,
    }
    server = ServerProc(tmp, database_url=url, admin_token=ADMIN, env=env).start()
    try:
        server.wait_ready()
        token = prepare(server, args.nodes)
        run_wrk(server.url, token, seconds=2, connections=args.connections, threads=1)  # warm
        # What limits the rate: the server process's CPU (100% = one core) and the machine's.
        proc = psutil.Process(server.popen.pid)  # type: ignore[union-attr]
        before, machine_before, started = proc.cpu_times(), psutil.cpu_times(), time.monotonic()
        result = run_wrk(
            server.url, token, seconds=args.seconds, connections=args.connections, threads=1
        )
        elapsed = time.monotonic() - started
        after, machine_after = proc.cpu_times(), psutil.cpu_times()
        used = (after.user - before.user) + (after.system - before.system)
        idle = machine_after.idle - machine_before.idle
        result["server_cpu_pct"] = 100 * used / elapsed
        # CPU per allocation moves far less than the rate when other work shares the cores.
        result["server_cpu_ms_per_allocation"] = 1000 * used / max(1, result["requests"] / 2)
        result["machine_busy_pct"] = 100 * (1 - idle / (elapsed * (psutil.cpu_count() or 1)))
        return result
    finally:
        server.stop()
        if not pg:
            for f in tmp.glob("bench.db*"):
                f.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite synchronous pragma")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-bench-"))
    pg = TempPostgres(fsync=True).start() if args.db == "postgresql" else None
    try:
        runs = [one_run(args.db, args, tmp, pg) for _ in range(args.runs)]
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {
        k: statistics.median(r[k] for r in runs)
        for k in (
            "allocations_per_s",
            "requests_per_s",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "server_cpu_pct",
            "server_cpu_ms_per_allocation",
            "machine_busy_pct",
        )
    }
    errors = sum(r["errors"] for r in runs)
    label = args.db + (f" (synchronous={args.synchronous})" if args.db == "sqlite" else "")
    print(f"machine: {describe()}")
    print(
        f"{label}: {med['allocations_per_s']:.0f} allocations/s "
        f"({med['requests_per_s']:.0f} requests/s), latency p50 {med['p50_ms']:.1f} ms, "
        f"p90 {med['p90_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms; median of {args.runs} runs "
        f"x {args.seconds}s, {args.connections} connections, errors {errors}"
    )
    print(
        f"server process {med['server_cpu_pct']:.0f}% of one core "
        f"({med['server_cpu_ms_per_allocation']:.2f} ms of CPU per allocation), machine "
        f"{med['machine_busy_pct']:.0f}% busy (both cores, wrk included)"
    )
    print(
        "runs:",
        json.dumps(
            [{k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
        ),
    )


if __name__ == "__main__":
    main()
