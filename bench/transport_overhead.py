"""What the transport guard costs: requests/s of GET /healthz through the guarded httptools
protocol (what `jitgpu server` serves with) against uvicorn's plain httptools, on one server
process each, alternating.

    .venv/bin/python bench/transport_overhead.py --runs 3

/healthz does no database work, so the HTTP parsing is as large a share of each request as
it gets: this is the worst case of the guard's cost. wrk makes the load (16 connections).
The server's CPU seconds per 1,000 requests are printed with the rate, since on a shared
machine the rate also moves with the neighbours.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from alloc_throughput import require_wrk
from machine import REPO, describe

from tests.support.pg import free_port

LAUNCH = """
import sys, uvicorn
from control_plane.api import transport
from control_plane.api.app import create_app
from control_plane.config import ServerSettings
s = ServerSettings(database_url=sys.argv[1], admin_token="bench-admin-token-0123456789",
                   run_jobs=False, rate_limits=False, log_level="warning")
http = transport.protocol_for(transport.limits_of(s)) if sys.argv[3] == "guarded" else "httptools"
uvicorn.run(create_app(s), host="127.0.0.1", port=int(sys.argv[2]), http=http,
            log_level="warning", access_log=False)
"""


def one(protocol: str, tmp: Path, seconds: int) -> tuple[float, float, float]:
    port = free_port()
    url = f"sqlite:///{tmp / f'{protocol}.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, url, str(port), protocol], cwd=REPO, env=os.environ
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.1)
        server = psutil.Process(proc.pid)
        before = server.cpu_times()
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                "-c16",
                f"-d{seconds}s",
                "--latency",
                f"http://127.0.0.1:{port}/healthz",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        after = server.cpu_times()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99_text = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert p99_text is not None
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99_text.group(2)]
    cpu = (after.user - before.user) + (after.system - before.system)
    return rate, float(p99_text.group(1)) * scale, cpu / (rate * seconds) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    require_wrk()
    results: dict[str, list[tuple[float, float, float]]] = {"guarded": [], "httptools": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for protocol in results:
                results[protocol].append(one(protocol, Path(tmp), args.seconds))
    print(describe())
    for protocol, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        print(
            f"{protocol:10s} GET /healthz: {rate:,.0f} requests/s, p99 {p99:.1f} ms, "
            f"server CPU {cpu:.2f} s per 1,000 requests (median of {len(runs)})"
        )


if __name__ == "__main__":
    main()
