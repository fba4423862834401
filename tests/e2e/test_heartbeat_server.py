"""Real processes: a heartbeats-role server on the main server's database takes a node agent's
heartbeats, the main server everything else; when it stops, the agent's heartbeats go to the
main server and the node stays online."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.support.nodes import enrol_token
from tests.support.pg import free_port
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "e2e-admin-token-0123456789abcdef"
HEARTBEAT_S = 0.3
TIMEOUT_S = 2.0  # the main server's heartbeat timeout: a node silent this long goes offline


def test_heartbeats_go_to_the_heartbeat_server_and_fall_back_to_the_main_one(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'jitgpu.db'}"
    main = ServerProc(
        tmp_path,
        database_url=url,
        admin_token=ADMIN_TOKEN,
        env={"JITGPU_HEARTBEAT_TIMEOUT_S": str(TIMEOUT_S), "JITGPU_JOBS_INTERVAL_S": "0.5"},
        name="main",
    ).start()
    procs: list[Proc] = [main]
    try:
        main.wait_ready()
        beats = ServerProc(
            tmp_path,
            database_url=url,
            admin_token=ADMIN_TOKEN,
            env={"JITGPU_ROLE": "heartbeats"},
            name="beats",
        ).start()
        procs.append(beats)
        beats.wait_ready()
        admin = main.admin()
        token = enrol_token(admin, "n1", {})
        tenant = admin.post("/v1/tenants", json={"name": "e2e", "quota_gpus": 1}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        config = tmp_path / "node.yaml"
        config.write_text(
            yaml.safe_dump({"heartbeat_interval_s": HEARTBEAT_S, "cache_dir": str(tmp_path / "c")})
        )
        args = [*JITGPU, "node", "--server", main.url, "--heartbeat-server", beats.url]
        args += ["--enrol-token", token, "--name", "n1", "--simulated-gpus", "1"]
        node = Proc([*args, "--config", str(config)], log=tmp_path / "node.log").start()
        procs.append(node)

        def online() -> bool:
            return [n["status"] for n in admin.get("/v1/nodes").json()] == ["online"]

        wait_for(online, timeout=30, what="the node online")
        wait_for(lambda: beats.heartbeats_served() >= 5, timeout=30, what="heartbeats at beats")
        assert main.heartbeats_served() == 0

        # Work still reaches the node through the main server (its long poll and reports).
        user = httpx.Client(base_url=main.url, headers={"Authorization": f"Bearer {key}"})
        job = user.post("/v1/allocations", json={"gpu_count": 1, "command": ["true"]}).json()

        def finished() -> dict | None:
            row = user.get(f"/v1/allocations/{job['id']}").json()
            return row if row["status"] == "released" else None

        assert wait_for(finished, timeout=30, what="the job to run")["task_status"] == "exited"

        # Anything but a heartbeat is refused by the heartbeats-role server, and said why.
        other = httpx.post(
            f"{beats.url}/v1/allocations",
            json={"gpu_count": 1},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert other.status_code == 421
        assert other.json()["error"]["code"] == "misdirected"
        assert httpx.get(f"{beats.url}/v1/nodes", timeout=5).status_code == 421

        beats.stop()
        # The main server takes the heartbeats now: more of them than its timeout lasts, and
        # the node never went offline.
        wait_for(
            lambda: main.heartbeats_served() >= 2 * TIMEOUT_S / HEARTBEAT_S,
            timeout=30,
            what="heartbeats at the main server",
        )
        assert online()
        events = admin.get("/v1/events", params={"limit": 1000}).json()
        assert not [e for e in events if e["to_state"] == "offline"], events
        assert "heartbeat server" in node.output() and "failed" in node.output()
    finally:
        for proc in reversed(procs):
            proc.stop()
    for proc in procs[:2]:
        assert "SQLite supports one replica" not in proc.output(), proc.output()[-2000:]
        assert "unhandled error" not in proc.output(), proc.output()[-2000:]


def test_one_command_starts_the_heartbeat_server_and_nodes_learn_of_it(tmp_path: Path) -> None:
    """`jitgpu server --heartbeat-port P` (here JITGPU_HEARTBEAT_PORT) starts the
    heartbeats-role server as its child; a node agent told only the main server's URL sends
    its heartbeats there; the child ends with the main server, even after a kill -9."""
    port = free_port()
    main = ServerProc(
        tmp_path,
        database_url=f"sqlite:///{tmp_path / 'jitgpu.db'}",
        admin_token=ADMIN_TOKEN,
        env={"JITGPU_HEARTBEAT_PORT": str(port)},
        name="main",
    ).start()
    procs: list[Proc] = [main]
    child: psutil.Process | None = None
    try:
        main.wait_ready()
        beats = main.heartbeat_child(port)
        child = psutil.Process(beats.pid)
        assert child.ppid() == main.pid

        admin = main.admin()
        token = enrol_token(admin, "n1", {})
        config = tmp_path / "node.yaml"
        config.write_text(
            yaml.safe_dump({"heartbeat_interval_s": HEARTBEAT_S, "cache_dir": str(tmp_path / "c")})
        )
        args = [*JITGPU, "node", "--server", main.url, "--config", str(config)]
        args += ["--enrol-token", token, "--name", "n1", "--simulated-gpus", "1"]
        node = Proc(args, log=tmp_path / "node.log").start()
        procs.append(node)
        wait_for(lambda: beats.heartbeats_served() >= 5, timeout=30, what="beats at the child")
        assert main.heartbeats_served() == 0
        assert [n["status"] for n in admin.get("/v1/nodes").json()] == ["online"]

        # The main server alone (kill9 would end its whole process group, the child too).
        os.kill(main.pid, signal.SIGKILL)
        assert main.popen is not None
        main.popen.wait(timeout=10)
        wait_for(lambda: _gone(child), timeout=15, what="the child to follow its parent")
    finally:
        for proc in reversed(procs):
            proc.stop()
        if child is not None and not _gone(child):
            child.kill()


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_heartbeat_child_that_cannot_listen_is_reported_and_the_server_works_on(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        main = ServerProc(
            tmp_path,
            admin_token=ADMIN_TOKEN,
            env={"JITGPU_HEARTBEAT_PORT": str(port)},
        ).start()
        try:
            main.wait_ready()
            wait_for(
                lambda: "exited with status" in main.output(),
                timeout=30,
                what="the main server to say its heartbeat child ended",
            )
            assert "send their heartbeats to this server instead" in main.output()
            assert main.alive()
            assert main.admin().get("/v1/nodes").status_code == 200
        finally:
            main.stop()
