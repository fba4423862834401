"""REST allocate+release throughput with durable commits, under wrk, on SQLite or PostgreSQL.

    .venv/bin/python bench/alloc_throughput.py --db sqlite --runs 3
    .venv/bin/python bench/alloc_throughput.py --db postgresql --runs 3
    .venv/bin/python bench/alloc_throughput.py --db postgresql --db-delay-ms 0.25 --runs 3

Each wrk connection alternates POST /v1/allocations (1 GPU) and DELETE of what it got, so one
allocation is two committed transactions. Prints the median over runs. `--db-delay-ms` puts
PostgreSQL behind a proxy that delays each direction (`delayproxy.py`), as a database on
another host would be: there the writer waits on round trips, not on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from machine import REPO, describe

from tests.support.pg import TempPostgres, free_port
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


def require_wrk() -> None:
    """Stop before any setup when wrk is missing: every load here is wrk's."""
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")


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


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def one_run(db: str, args: argparse.Namespace, tmp: Path, pg: TempPostgres | None) -> dict:
    url = pg.url(pg.create_database()) if pg else f"sqlite:///{tmp / 'bench.db'}"
    proxy = None
    if pg and args.db_delay_ms is not None:
        port = free_port()
        delay_s = str(args.db_delay_ms / 1000)
        script = str(REPO / "bench" / "delayproxy.py")
        proxy = subprocess.Popen([sys.executable, script, str(port), str(pg.port), delay_s])
        _wait_for_port(port)
        url = url.replace(f":{pg.port}/", f":{port}/")
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
        if proxy is not None:
            proxy.kill()
            proxy.wait()
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
    parser.add_argument(
        "--db-delay-ms",
        type=float,
        default=None,
        help="PostgreSQL only: delay each direction by this much, through a proxy",
    )
    args = parser.parse_args()
    if args.db_delay_ms is not None and args.db != "postgresql":
        parser.error("--db-delay-ms applies to --db postgresql only")
    require_wrk()
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
    if args.db_delay_ms is not None:
        label += f" behind a proxy delaying each way {args.db_delay_ms:g} ms"
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
