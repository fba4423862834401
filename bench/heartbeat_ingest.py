"""Heartbeat ingestion: 1,250 simulated nodes x 8 GPUs of telemetry, and what it costs the
allocation rate.

    .venv/bin/python bench/heartbeat_ingest.py --runs 1 --pairs 6

Registers 1,250 nodes (10,000 GPUs) on a SQLite server (`--db postgresql`: a throwaway
PostgreSQL with fsync on), then measures (1) the most heartbeats per second the server absorbs
(wrk, each request a node's full telemetry), and (2) allocate+release throughput under wrk in
windows that take turns: with no heartbeats, with the target heartbeat rate (1,250 nodes
every 5 s = 250/s) sent to the same server, and with it sent to a heartbeats-role server on
the same database (`jitgpu server --role heartbeats`, the layout docs/operations.md
describes; with `--child`, the one the main server starts itself with `--heartbeat-port`).
The heartbeats come from a second wrk,
paced by a random delay between each of its connections' requests. Each round of the three
windows gives one ratio per layout against its own idle window; the median over all rounds is
the figure. On PostgreSQL the rounds start once the new database has settled: ten seconds of
allocations and a VACUUM ANALYZE, as its first autovacuum would (`settle`). wrk, not a Python
client, makes the load: a Python load generator would take a
good part of one of the two cores and count as the heartbeats' cost."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import cpu_shares
import psycopg
from alloc_throughput import ADMIN, UNLIMITED, require_wrk, run_wrk
from machine import describe

from tests.support.pg import TempPostgres, free_port
from tests.support.procs import ChildServer, ServerProc

NODES = 1250
# The paced heartbeats: this many connections, each waiting a random time between its
# requests (uniform, 0.5x to 1.5x of the mean that gives the target rate), so that they
# arrive spread out as independent nodes' would, not in synchronised waves. Many connections
# with long waits make the answers' own time a small part of each cycle (the rate reached is
# within about 1% of the target), and every wait stays under the server's 5 s keep-alive.
PACED_CONNECTIONS = 625
# Seconds for every paced connection to have sent its first heartbeat (its first wait is at
# most 1.5x the mean, 3 s at the target rate).
RAMP_S = 4.0
GPUS = 8


def telemetry(node: int) -> dict:
    rng = random.Random(node)
    return {
        "gpus": [
            {
                "uuid": f"GPU-{node}-{i}",
                "healthy": True,
                "memory_used_mb": rng.randint(0, 80000),
                "utilization_pct": rng.uniform(0, 100),
                "temperature_c": rng.uniform(30, 80),
                "power_w": rng.uniform(60, 700),
                "ecc_uncorrected": 0,
            }
            for i in range(GPUS)
        ],
        "host": {
            "cpu_pct": rng.uniform(0, 100),
            "memory_pct": rng.uniform(0, 100),
            "cache_disk_free_mb": 500_000,
        },
    }


def register(server: ServerProc) -> tuple[list[str], str, str]:
    """Nodes (by id), each node's own credential (a node acts only as itself), a tenant key."""
    ids = []
    tokens = []
    with server.admin() as admin:
        for n in range(NODES):
            enrolled = admin.post("/v1/nodes/enrol", json={"name": f"n{n}"})
            enrolled.raise_for_status()
            tokens.append(enrolled.json()["credential"])
            body = {
                "name": f"n{n}",
                "spine": f"spine{n // 400}",
                "leaf": f"leaf{n // 10}",
                "gpus": [
                    {"uuid": f"GPU-{n}-{i}", "model": "A100", "memory_mb": 81920, "index": i}
                    for i in range(GPUS)
                ],
            }
            r = admin.post("/v1/nodes", json=body)
            r.raise_for_status()
            ids.append(r.json()["id"])
        tenant = admin.post("/v1/tenants", json={"name": "bench", "quota_gpus": 1000}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
    return ids, tokens, key


def heartbeat_wrk(
    url: str,
    ids: list[str],
    tokens: list[str],
    seconds: float,
    tmp: Path,
    *,
    connections: int = 8,
    delay_ms: float | None = None,
) -> dict:
    """wrk cycling over every node's heartbeat: as fast as it can (the most the server
    absorbs), or with `delay_ms` between a connection's requests (a paced load that costs the
    machine little CPU, unlike a Python load generator)."""
    script = tmp / "hb.lua"
    bodies = [json.dumps(telemetry(n)) for n in range(len(ids))]
    # The requests are made in init(): before it wrk has not set its Host header, and a
    # request without one is refused (400) by the server's HTTP/1.1 parser.
    lines = ["local reqs = {}", "function init(args)"]
    for node_id, token, body in zip(ids, tokens, bodies, strict=True):
        escaped = body.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(
            f'reqs[#reqs+1] = wrk.format("POST", "/v1/nodes/{node_id}/heartbeat", '
            f'{{["Content-Type"]="application/json", ["Authorization"]="Bearer {token}"}}'
            f', "{escaped}")'
        )
    lines += [
        "end",
        "local i = 0",
        "function request() i = i % #reqs + 1 return reqs[i] end",
        *(
            [f"function delay() return math.random({delay_ms / 2:.0f}, {1.5 * delay_ms:.0f}) end"]
            if delay_ms
            else []
        ),
        "function done(summary, latency, requests)",
        ' io.write(string.format("JSON {\\"requests\\": %d, \\"seconds\\": %.3f, '
        '\\"errors\\": %d, \\"p99_ms\\": %.3f}\\n", summary.requests, '
        "summary.duration / 1e6, summary.errors.status + summary.errors.connect + "
        "summary.errors.timeout, latency:percentile(99) / 1000))",
        "end",
    ]
    script.write_text("\n".join(lines))
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:.0f}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(next(x for x in out.splitlines() if x.startswith("JSON "))[5:])
    if result["errors"]:
        # Refused heartbeats cost the server far less than real ones: such a run measures
        # nothing (an earlier version of this script sent them without a Host header).
        raise SystemExit(f"{result['errors']} of {result['requests']} heartbeats failed")
    result["per_s"] = result["requests"] / result["seconds"]
    return result


def measured_alloc(server: ServerProc, key: str, seconds: int, named: dict[str, int]) -> dict:
    """One window of allocate+release under wrk, with the cores each process used in it."""
    before, started = cpu_shares.snapshot(named), time.monotonic()
    result = run_wrk(server.url, key, seconds=seconds, connections=16, threads=1)
    result["cores"] = cpu_shares.used(
        before, cpu_shares.snapshot(named), time.monotonic() - started
    )
    return result


def loaded_window(
    server: ServerProc,
    beats_to: ServerProc | ChildServer,
    ids: list[str],
    tokens: list[str],
    key: str,
    args: argparse.Namespace,
    tmp: Path,
    named: dict[str, int],
) -> tuple[dict, float]:
    """Allocate+release on `server` while PACED_CONNECTIONS connections send about
    `args.rate` heartbeats/s to `beats_to` (each connection's first wait is random too): the
    allocations are measured once all of them are sending, and the heartbeat rate is the
    receiving server's own count over the same seconds."""
    pacer = threading.Thread(
        target=heartbeat_wrk,
        args=(beats_to.url, ids, tokens, RAMP_S + args.seconds + 2, tmp),
        kwargs={"connections": PACED_CONNECTIONS, "delay_ms": 1000 * PACED_CONNECTIONS / args.rate},
    )
    pacer.start()
    time.sleep(RAMP_S)
    beats, started = beats_to.heartbeats_served(), time.monotonic()
    busy = measured_alloc(server, key, args.seconds, named)
    window = time.monotonic() - started
    beats = beats_to.heartbeats_served() - beats
    pacer.join()
    return busy, round(beats / window, 1)


def settle(server: ServerProc, key: str, url: str) -> None:
    """PostgreSQL: the database as a running one is, not as a new one's first minute. Its new
    tables' first allocations are planned on the statistics of empty tables, and their dead
    rows wait for autovacuum, which looks at a database once a minute (BENCHMARKS.md,
    "Allocation rate as history grows"): ten seconds of allocations, then what that first
    autovacuum would do."""
    run_wrk(server.url, key, seconds=10, connections=16, threads=1)
    dsn = url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


# The windows of a round, in an order that turns with each round so that none always comes
# first or after the same other.
WINDOWS = ("idle", "same", "split")
ORDERS = list(itertools.permutations(WINDOWS))


def one_run(args: argparse.Namespace, tmp: Path, pg: TempPostgres | None) -> dict:
    for f in tmp.glob("hb.db*"):
        f.unlink()
    env = {
        "JITGPU_LOG_LEVEL": "warning",
        "JITGPU_HEARTBEAT_TIMEOUT_S": "3600",
        # All the paced connections come from this one address (real nodes have their own).
        "JITGPU_MAX_CONNECTIONS_PER_IP": str(4 * PACED_CONNECTIONS),
        **UNLIMITED,
    }
    url = pg.url(pg.create_database()) if pg else f"sqlite:///{tmp / 'hb.db'}"
    port = free_port()
    one_command = {"JITGPU_HEARTBEAT_PORT": str(port)} if args.child else {}
    server = ServerProc(tmp, database_url=url, admin_token=ADMIN, env={**env, **one_command})
    server.start()
    beats: ServerProc | ChildServer | None = None
    try:
        server.wait_ready()
        if args.child:  # one command: the main server's own child
            beats = server.heartbeat_child(port)
        else:
            beats = ServerProc(
                tmp,
                database_url=url,
                admin_token=ADMIN,
                env={**env, "JITGPU_ROLE": "heartbeats"},
                name="beats",
            ).start()
            beats.wait_ready()
        ids, tokens, key = register(server)
        hb = heartbeat_wrk(server.url, ids, tokens, args.seconds, tmp)
        # A node's first heartbeat through a server looks its key up on the framework's route;
        # the run above did so on the main server, this does it on the heartbeat server (every
        # node at least once), so that its first loaded window does not pay for it either.
        heartbeat_wrk(beats.url, ids, tokens, 3, tmp)
        run_wrk(server.url, key, seconds=2, connections=16, threads=1)  # warm-up
        if pg is not None:
            settle(server, key, url)
        # This machine's speed drifts by more than the effect between runs minutes apart,
        # much less between adjacent windows: each round's windows are compared to each other.
        named = {"server": server.pid, "beats": beats.pid}
        rounds = []
        for n in range(args.pairs):
            w: dict[str, dict] = {}
            rate: dict[str, float] = {}
            for name in ORDERS[n % len(ORDERS)]:
                if name == "idle":
                    w[name] = measured_alloc(server, key, args.seconds, named)
                else:
                    to = server if name == "same" else beats
                    w[name], rate[name] = loaded_window(
                        server, to, ids, tokens, key, args, tmp, named
                    )
            rounds.append(
                {
                    "alloc_idle": w["idle"]["allocations_per_s"],
                    "alloc_same": w["same"]["allocations_per_s"],
                    "alloc_split": w["split"]["allocations_per_s"],
                    "p99_idle_ms": w["idle"]["p99_ms"],
                    "p99_same_ms": w["same"]["p99_ms"],
                    "p99_split_ms": w["split"]["p99_ms"],
                    "beats_same_per_s": rate["same"],
                    "beats_split_per_s": rate["split"],
                    "cores": {k: w[k]["cores"] for k in WINDOWS},
                }
            )
        return {
            "heartbeats_per_s_max": hb["per_s"],
            "heartbeat_p99_ms": hb["p99_ms"],
            "rounds": rounds,
        }
    finally:
        if isinstance(beats, ServerProc):
            beats.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--pairs",
        type=int,
        default=4,
        help="rounds per server, each of an idle window and one loaded window per layout",
    )
    parser.add_argument("--rate", type=float, default=NODES / 5.0, help="paced heartbeats/s")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--child",
        action="store_true",
        help="the heartbeat server as the main server's child (jitgpu server --heartbeat-port) "
        "instead of a second jitgpu server --role heartbeats",
    )
    args = parser.parse_args()
    require_wrk()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-hb-"))
    pg = TempPostgres(fsync=True).start() if args.db == "postgresql" else None
    try:
        runs = [one_run(args, tmp, pg) for _ in range(args.runs)]
    finally:
        if pg is not None:
            pg.stop()
    rounds = [r for run in runs for r in run["rounds"]]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k != "cores"}
    hb_max = statistics.median(r["heartbeats_per_s_max"] for r in runs)
    hb_p99 = statistics.median(r["heartbeat_p99_ms"] for r in runs)
    print(f"machine: {describe()}; database: {args.db}")
    print(
        f"heartbeats absorbed: {hb_max:.0f}/s max (8 GPUs of telemetry each, p99 "
        f"{hb_p99:.1f} ms); target {NODES / 5:.0f}/s"
    )
    print(
        f"allocate+release, median of {len(rounds)} rounds ({args.runs} servers x "
        f"{args.pairs}): {med['alloc_idle']:.0f}/s idle cluster (p99 {med['p99_idle_ms']:.1f} ms)"
    )
    for layout, what in (("same", "the same server"), ("split", "a heartbeats-role server")):
        drops = [1 - r[f"alloc_{layout}"] / r["alloc_idle"] for r in rounds]
        print(
            f"  heartbeats to {what}: {med[f'alloc_{layout}']:.0f}/s with "
            f"{med[f'beats_{layout}_per_s']:.0f} heartbeats/s (p99 {med[f'p99_{layout}_ms']:.1f} "
            f"ms); lower by a median {statistics.median(drops):.1%} (rounds: "
            + ", ".join(f"{d:.1%}" for d in drops)
            + ")"
        )
    print("cores used, median per window (rest: the load generators and everything else):")
    for window in WINDOWS:
        groups = rounds[0]["cores"][window]
        print(
            f"  {window}: "
            + ", ".join(
                f"{g} {statistics.median(r['cores'][window][g] for r in rounds):.2f}"
                for g in groups
            )
        )
    print("runs:", json.dumps(runs, default=lambda v: round(v, 1)))


if __name__ == "__main__":
    main()
