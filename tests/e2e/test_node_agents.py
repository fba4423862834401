"""Real processes on 127.0.0.1: a server on SQLite and two node agents with simulated GPUs.

A hold is warmed by a real command and claimed; a kill -9 of one agent takes its node offline
and its hold moves to the other node; a server restart loses no hold and no allocation.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.node_agent.helpers import gone
from tests.support.nodes import enrol_token
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "e2e-admin-token-0123456789abcdef"
HEARTBEAT_TIMEOUT_S = 5.0
JOBS_INTERVAL_S = 0.5
SERVER_ENV = {
    "JITGPU_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
    "JITGPU_JOBS_INTERVAL_S": str(JOBS_INTERVAL_S),
}


def agent_config(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.yaml"
    record = f'echo "$JITGPU_HOLD_ID $CUDA_VISIBLE_DEVICES" >> {tmp / "warmups.log"}'
    path.write_text(
        yaml.safe_dump(
            {
                "heartbeat_interval_s": 0.5,
                "backoff": {"initial_s": 0.2, "max_s": 1.0},
                "cache_dir": str(tmp / f"cache-{name}"),
                "tasks": {"stop_grace_s": 2, "output_report_interval_s": 0.5},
                "warmup_profiles": {
                    "e2e": [{"cuda_context": True}, {"command": record, "timeout_s": 30}]
                },
            }
        )
    )
    return path


def start_agent(tmp: Path, server: ServerProc, token: str, name: str, gpus: int, leaf: str) -> Proc:
    """A `jitgpu node` that enrols with `token` once and keeps its credential in its cache."""
    args = [
        *JITGPU,
        "node",
        "--server",
        server.url,
        "--enrol-token",
        token,
        "--name",
        name,
        "--simulated-gpus",
        str(gpus),
        "--gpu-model",
        "A100",
        "--leaf",
        leaf,
        "--config",
        str(agent_config(tmp, name)),
    ]
    return Proc(args, log=tmp / f"{name}.log").start()


def test_two_node_agents_warm_claim_fail_over_and_survive_a_restart(tmp_path: Path) -> None:
    server = ServerProc(tmp_path, admin_token=ADMIN_TOKEN, env=SERVER_ENV).start().wait_ready()
    procs: list[Proc] = [server]
    try:
        admin = server.admin()
        tenant_id = admin.post("/v1/tenants", json={"name": "e2e", "quota_gpus": 8}).json()["id"]
        key = admin.post(f"/v1/tenants/{tenant_id}/api-keys").json()["key"]
        user = server.admin()
        user.headers["Authorization"] = f"Bearer {key}"

        node_a = start_agent(
            tmp_path, server, enrol_token(admin, "node-a", {}), "node-a", 3, "leaf0"
        )
        node_b = start_agent(
            tmp_path, server, enrol_token(admin, "node-b", {}), "node-b", 1, "leaf1"
        )
        procs += [node_a, node_b]

        def nodes() -> dict[str, dict]:
            return {n["name"]: n for n in admin.get("/v1/nodes").json()}

        def both_online() -> bool:
            for p in (node_a, node_b):
                assert p.alive(), p.output()[-3000:]
            now = nodes()
            return all(
                n in now and now[n]["status"] == "online" and len(now[n]["gpus"]) == count
                for n, count in (("node-a", 3), ("node-b", 1))
            )

        wait_for(both_online, timeout=30, what="both node agents to register")

        # Best fit: the one-GPU hold takes node-b's only GPU, the two-GPU hold goes to node-a.
        h2 = user.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600, "warmup": "e2e"}).json()
        h1 = user.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 600, "warmup": "e2e"}).json()
        assert [g["node"] for g in h2["gpus"]] == ["node-b"]
        assert {g["node"] for g in h1["gpus"]} == {"node-a"}

        def hold(h: dict) -> dict:
            return user.get(f"/v1/holds/{h['id']}").json()

        for h in (h1, h2):
            wait_for(lambda h=h: hold(h)["status"] == "ready", timeout=20, what=f"{h['id']} ready")
        assert hold(h1)["warmup_s"] > 0
        warmed = (tmp_path / "warmups.log").read_text().splitlines()
        assert f"{h1['id']} {','.join(g['uuid'] for g in h1['gpus'])}" in warmed
        assert f"{h2['id']} {h2['gpus'][0]['uuid']}" in warmed

        # Claim the warm hold: instant, and the task runs with exactly the hold's GPUs.
        pidfile = tmp_path / "task.pid"
        # The pid file first, closed, then the line the test waits for: once the line has
        # reached the server, the file is there to read.
        script = (
            f"import os, time; f = open({str(pidfile)!r}, 'w'); f.write(str(os.getpid())); "
            "f.close(); print('task on', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
            "time.sleep(300)"
        )
        alloc = user.post(
            f"/v1/holds/{h1['id']}/claim", json={"command": [sys.executable, "-c", script]}
        ).json()
        assert alloc["status"] == "allocated" and alloc["warm"] is True
        assert alloc["time_to_gpu_s"] == 0.0

        def allocation() -> dict:
            return user.get(f"/v1/allocations/{alloc['id']}").json()

        wait_for(
            lambda: "task on GPU-" in (allocation()["output_tail"] or ""),
            timeout=20,
            what="the task to run and its output to reach the server",
        )
        assert allocation()["task_status"] == "running"
        task_pid = int(pidfile.read_text())

        # kill -9 of node-b's agent: offline within the timeout plus one job period, and its
        # hold moves to node-a, which warms it again.
        node_b.kill9()
        killed_at = time.monotonic()
        wait_for(
            lambda: nodes()["node-b"]["status"] == "offline",
            timeout=HEARTBEAT_TIMEOUT_S + JOBS_INTERVAL_S + 10,
            what="node-b to go offline",
        )
        took = time.monotonic() - killed_at
        assert took <= HEARTBEAT_TIMEOUT_S + JOBS_INTERVAL_S + 2.0, took
        wait_for(
            lambda: (
                hold(h2)["status"] == "ready"
                and [g["node"] for g in hold(h2)["gpus"]] == ["node-a"]
            ),
            timeout=20,
            what="the hold of node-b to be re-placed on node-a and warmed",
        )
        (moved,) = hold(h2)["gpus"]
        moved_to = moved["uuid"]
        assert f"{h2['id']} {moved_to}" in (tmp_path / "warmups.log").read_text().splitlines()

        # Restart the server on the same database: nothing is lost, the agent re-registers
        # (without new GPUs) and its task keeps running.
        server.stop()
        server = ServerProc(
            tmp_path, admin_token=ADMIN_TOKEN, env=SERVER_ENV, port=server.port, name="server2"
        )
        procs.append(server.start().wait_ready())
        admin, user_key = server.admin(), key
        user = server.admin()
        user.headers["Authorization"] = f"Bearer {user_key}"
        wait_for(
            lambda: node_a.output().count("registered as node-a") >= 2,
            timeout=20,
            what="node-a to register again after the restart",
        )
        assert node_a.output().count("control plane unreachable") >= 1
        assert hold(h1)["status"] == "claimed"
        assert hold(h2)["status"] == "ready" and [g["uuid"] for g in hold(h2)["gpus"]] == [moved_to]
        after = allocation()
        assert after["status"] == "allocated" and after["task_status"] == "running"
        assert nodes()["node-a"]["status"] == "online"
        assert len(admin.get("/v1/gpus").json()) == 4
        assert not gone(task_pid)  # the task process was not restarted or lost
        assert allocation()["output_tail"].count("task on") == 1

        # Releasing the allocation stops the task's process group.
        assert user.delete(f"/v1/allocations/{alloc['id']}").status_code == 200
        wait_for(
            lambda: allocation()["task_status"] == "stopped",
            timeout=20,
            what="the task to be stopped",
        )
        wait_for(lambda: gone(task_pid), timeout=5, what="the task process to exit")

        # SIGTERM: clean exit, drain reported.
        assert node_a.stop() == 0
        assert "reported drain" in node_a.output()
        assert nodes()["node-a"]["status"] == "draining"
    finally:
        for proc in reversed(procs):
            proc.stop()
