"""Real server and node agent: a placed task starts at once, not at the agent's next heartbeat.

The agent long-polls `GET /v1/nodes/{id}/work`; the server answers it as soon as an
assignment of that node commits. With the default 5 s heartbeat, queued jobs run back to
back: each starts well within a heartbeat interval of its allocation.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.nodes import enrol_token
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "e2e-admin-token-0123456789abcdef"
HEARTBEAT_S = 5.0  # the default: the test shows work does not wait for it
JOBS = 4
# Prints when the task began, so that the test reads the start time from the task itself.
STAMP = [sys.executable, "-c", "import time; print(f'started {time.time():.6f}')"]


def _agent(tmp: Path, server: ServerProc, token: str, *, long_poll_s: float) -> Proc:
    config = tmp / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "heartbeat_interval_s": HEARTBEAT_S,
                "long_poll_s": long_poll_s,
                "cache_dir": str(tmp / "cache"),
                "tasks": {"stop_grace_s": 2, "output_report_interval_s": 0.5},
            }
        )
    )
    args = [*JITGPU, "node", "--server", server.url, "--enrol-token", token, "--name", "n1"]
    args += ["--simulated-gpus", "2", "--gpu-model", "A100", "--config", str(config)]
    return Proc(args, log=tmp / "node.log").start()


def _run_jobs(tmp: Path, *, long_poll_s: float) -> list[dict]:
    """JOBS one-GPU jobs with a quota of 1 (the queue holds the rest); their final records."""
    server = ServerProc(tmp, admin_token=ADMIN_TOKEN).start().wait_ready()
    procs: list[Proc] = [server]
    try:
        admin = server.admin()
        token = enrol_token(admin, "n1", {})
        tenant = admin.post("/v1/tenants", json={"name": "e2e", "quota_gpus": 1}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        procs.append(_agent(tmp, server, token, long_poll_s=long_poll_s))
        wait_for(
            lambda: any(n["status"] == "online" for n in admin.get("/v1/nodes").json()),
            timeout=30,
            what="the node online",
        )
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as user:
            ids = []
            for _ in range(JOBS):
                r = user.post("/v1/allocations", json={"gpu_count": 1, "command": STAMP})
                assert r.status_code in (201, 202), r.text
                ids.append(r.json()["id"])

            def all_done() -> list[dict] | None:
                rows = [user.get(f"/v1/allocations/{i}").json() for i in ids]
                return rows if all(r["status"] == "released" for r in rows) else None

            return wait_for(all_done, timeout=60, what="all jobs to finish", interval=0.2)
    finally:
        for proc in reversed(procs):
            proc.stop()


def _start_delays(jobs: list[dict]) -> list[float]:
    """Seconds from each allocation (server's time) to its task's own start stamp."""
    delays = []
    for job in jobs:
        assert job["task_status"] == "exited", job
        started = float(job["output_tail"].split("started ")[1].split()[0])
        delays.append(started - datetime.fromisoformat(job["allocated_at"]).timestamp())
    return delays


def test_long_poll_starts_each_task_well_within_a_heartbeat(tmp_path: Path) -> None:
    jobs = _run_jobs(tmp_path, long_poll_s=20)
    delays = _start_delays(jobs)
    # The task's own interpreter start is part of the delay; a heartbeat would be up to 5 s.
    assert max(delays) < HEARTBEAT_S / 3, delays
    assert sorted(delays)[len(delays) // 2] < 1.0, delays


def test_without_long_poll_the_next_task_starts_right_after_an_exit(tmp_path: Path) -> None:
    """The agent asks for work as soon as it has reported a task's exit."""
    jobs = _run_jobs(tmp_path, long_poll_s=0)
    delays = _start_delays(jobs)
    # The first job waits for a heartbeat; each next one was placed by the previous exit.
    assert max(delays[1:]) < HEARTBEAT_S / 3, delays


def test_a_server_stops_promptly_while_a_node_long_polls(tmp_path: Path) -> None:
    """The graceful stop waits for requests in flight; the poll is answered at once."""
    server = ServerProc(tmp_path, admin_token=ADMIN_TOKEN).start().wait_ready()
    procs: list[Proc] = [server]
    try:
        admin = server.admin()
        token = enrol_token(admin, "n1", {})
        node = _agent(tmp_path, server, token, long_poll_s=50)
        procs.append(node)
        wait_for(
            lambda: any(n["status"] == "online" for n in admin.get("/v1/nodes").json()),
            timeout=30,
            what="the node online",
        )
        time.sleep(0.5)  # let the first poll reach the server (bounded, not awaited)
        started = time.monotonic()
        server.stop()
        # Held open, the poll would keep the old server up for its 5 s graceful timeout.
        assert time.monotonic() - started < 4.0
    finally:
        for proc in reversed(procs):
            proc.stop()
