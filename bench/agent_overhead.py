"""Smart-agent overhead and event-to-hold latency.

The policy's min_confidence is near 0 because the cue predictor rightly loses faith in a
cue that no job follows, and this benchmark writes the cue again and again without jobs.

    .venv/bin/python bench/agent_overhead.py [--seconds 60] [--rate 10000] [--samples 5]

Runs a real `jitgpu agent run` against a control plane on loopback and measures (1) its
CPU (% of one core) and RSS while idle, (2) the same while a writer appends `--rate` log
lines per minute to four watched files, and (3) the time from writing a strong cue line
("preprocessing done") to the hold it causes existing on the control plane.
"""

from __future__ import annotations

import argparse
import datetime
import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import yaml
from machine import describe

from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

ADMIN = "bench-admin-token-0123456789"
LINE = (
    "2026-11-22 10:00:00,123 INFO trainer: step {n} loss=0.{n:04d} lr=3e-4 "
    "grad_norm=1.02 throughput=812 samples/s\n"
)


def usage(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """Mean % of one core and peak RSS (MiB) of the process over `seconds`."""
    before = proc.cpu_times()
    peak = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, proc.memory_info().rss / 2**20)
        time.sleep(0.5)
    after = proc.cpu_times()
    cpu = (after.user + after.system) - (before.user + before.system)
    return 100.0 * cpu / seconds, peak


def _outcome(log: Path, hold_id: str) -> str | None:
    with sqlite3.connect(log) as db:
        row = db.execute("SELECT outcome FROM forecasts WHERE hold_id = ?", (hold_id,)).fetchone()
    return row[0] if row and row[0] != "pending" else None


def write_lines(folder: Path, per_minute: int, seconds: float) -> int:
    files = [(folder / f"train{i}.log").open("a", buffering=1) for i in range(4)]
    interval = 60.0 / per_minute
    n = 0
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        target = start + n * interval
        if target > now:
            time.sleep(target - now)
        files[n % 4].write(LINE.format(n=n))
        n += 1
    for f in files:
        f.close()
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=10_000, help="log lines per minute")
    parser.add_argument("--samples", type=int, default=5, help="cue-to-hold measurements")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-agent-bench-"))
    (tmp / "logs").mkdir()
    server = ServerProc(tmp, admin_token=ADMIN, env={"JITGPU_LOG_LEVEL": "warning"}).start()
    agent: Proc | None = None
    try:
        server.wait_ready()
        with server.admin() as admin:
            admin.post(
                "/v1/nodes",
                json={
                    "name": "n1",
                    "gpus": [{"uuid": f"G{i}", "model": "A100", "memory_mb": 1} for i in range(8)],
                },
            )
            tenant = admin.post("/v1/tenants", json={"name": "bench", "quota_gpus": 8}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            admin.put(
                f"/v1/policies/{tenant['id']}",
                json={
                    "max_held_gpus": 1000,
                    "max_idle_gpu_hours_per_day": 1000,
                    "max_hold_ttl_s": 3600,
                    "allowed_warmups": None,
                    "holds_may_preempt_holds": False,
                },
            ).raise_for_status()
        (tmp / "policy.yaml").write_text(
            yaml.safe_dump(
                {
                    "min_confidence": 0.01,
                    "lead_s": 0,
                    "predictors": ["cues"],
                    "ensemble": "off",
                    "cooldown_s": {"default": 0},
                    "max_gpus_total": 1000,
                    "max_gpus_per_hold": 1,
                    "daily_idle_gpu_hours": 1000,
                    "cancel_below": 0.0,
                }
            )
        )
        (tmp / "agent.yaml").write_text(
            yaml.safe_dump(
                {
                    "server": server.url,
                    "policy": "policy.yaml",
                    "cycle_s": 60,
                    "reconcile_s": 0.5,
                    "prediction_log": str(tmp / "predictions.db"),
                    "debounce_s": 0,
                    "watch": [{"path": str(tmp / "logs"), "include": ["*.log"]}],
                }
            )
        )
        agent = Proc(
            [*JITGPU, "agent", "run", "--config", str(tmp / "agent.yaml"), "--quiet"],
            log=tmp / "agent.log",
            env={"JITGPU_TOKEN": key},
        ).start()
        wait_for(lambda: "watching" in agent.output(), timeout=60, what="the agent")
        proc = psutil.Process(agent.pid)
        time.sleep(5)
        idle_cpu, idle_rss = usage(proc, min(30.0, args.seconds))
        writer = threading.Thread(target=write_lines, args=(tmp / "logs", args.rate, args.seconds))
        writer.start()
        busy_cpu, busy_rss = usage(proc, args.seconds)
        writer.join()
        latencies = []
        headers = {"Authorization": f"Bearer {key}"}
        with (
            httpx.Client(base_url=server.url, headers=headers) as http,
            (tmp / "logs" / "pipeline.log").open("a", buffering=1) as log,
        ):
            for i in range(args.samples):
                seen = {h["id"] for h in http.get("/v1/holds?limit=1000").json()}
                written = time.time()
                log.write(f"[run {i}] preprocessing done\n")
                hold = wait_for(
                    lambda s=seen: next(
                        (h for h in http.get("/v1/holds?limit=1000").json() if h["id"] not in s),
                        None,
                    ),
                    timeout=30,
                    what="the hold",
                    interval=0.01,
                )
                made = datetime.datetime.fromisoformat(hold["created_at"]).timestamp()
                latencies.append(made - written)
                # Cancel it, so that the next cue is not covered by this hold's window, and
                # wait until the agent has seen the cancellation (its next reconcile).
                http.delete(f"/v1/holds/{hold['id']}")
                wait_for(
                    lambda h=hold["id"]: _outcome(tmp / "predictions.db", h),
                    timeout=30,
                    what="the agent to see the cancellation",
                )
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
    print(f"machine: {describe()}")
    print(f"agent idle: {idle_cpu:.2f}% of one core, RSS {idle_rss:.0f} MiB")
    print(
        f"agent at {args.rate} log lines/min into 4 files: {busy_cpu:.2f}% of one core, "
        f"peak RSS {busy_rss:.0f} MiB ({args.seconds:.0f}s)"
    )
    print(
        f"event-to-hold latency: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} cues "
        "(file poll every 1 s: the watcher's default poll_s)"
    )
    print("each (s):", ", ".join(f"{x:.2f}" for x in latencies))


if __name__ == "__main__":
    main()
