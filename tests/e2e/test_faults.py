"""Faults survived with real processes: a killed server, a database that goes away, a dead
leader replica. Nothing acknowledged is lost and no GPU is ever assigned twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from control_plane.db.engine import Database
from control_plane.jobs import leader
from tests.conftest import ADMIN_TOKEN
from tests.e2e.test_concurrency import _check_database
from tests.support.pg import TempPostgres
from tests.support.procs import ServerProc, wait_for

pytestmark = pytest.mark.e2e


def _tenant(server: ServerProc, gpus: int = 16) -> dict:
    with server.admin() as admin:
        for n in range(gpus // 8):
            admin.post(
                "/v1/nodes",
                json={
                    "name": f"n{n}",
                    "gpus": [
                        {"uuid": f"GPU-{n}-{i}", "model": "A100", "memory_mb": 1} for i in range(8)
                    ],
                },
            ).raise_for_status()
        tenant = admin.post("/v1/tenants", json={"name": "load", "quota_gpus": gpus}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
    return {"Authorization": f"Bearer {key}"}


def _load(
    urls: list[str], headers: dict, stop: threading.Event, acked: list, lock: threading.Lock
) -> None:
    """Allocate and release in a loop through the given replicas, keeping every 2xx."""
    n = 0
    clients = [httpx.Client(base_url=u, headers=headers, timeout=5) for u in urls]
    try:
        while not stop.is_set():
            http = clients[n % len(clients)]
            n += 1
            try:
                r = http.post("/v1/allocations", json={"gpu_count": 1, "use_holds": False})
                if r.status_code in (201, 202):
                    with lock:
                        acked.append(r.json())
                    http.delete(f"/v1/allocations/{r.json()['id']}")
            except httpx.HTTPError:
                time.sleep(0.05)  # a replica is down: the load goes on through the others
    finally:
        for c in clients:
            c.close()


def test_sqlite_server_killed_mid_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jitgpu.db'}"
    server = ServerProc(tmp_path, database_url=url, admin_token=ADMIN_TOKEN).start()
    server.wait_ready()
    headers = _tenant(server)
    with httpx.Client(base_url=server.url, headers=headers) as http:
        hold = http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}).json()
    acked: list = []
    stop, lock = threading.Event(), threading.Lock()
    threads = [
        threading.Thread(target=_load, args=([server.url], headers, stop, acked, lock))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) >= 40, timeout=30, what="some acknowledged allocations")
    server.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    restarted = ServerProc(
        tmp_path, database_url=url, admin_token=ADMIN_TOKEN, port=server.port, name="server2"
    ).start()
    try:
        restarted.wait_ready()
        with httpx.Client(base_url=restarted.url, headers=headers) as http:
            assert http.get(f"/v1/holds/{hold['id']}").json()["status"] == "ready"
            for answer in acked[:20]:
                assert http.get(f"/v1/allocations/{answer['id']}").status_code == 200
    finally:
        restarted.stop()
    _check_database(url, acked)


def test_database_outage_gives_503_then_recovers(
    pg_server: TempPostgres | None, tmp_path: Path
) -> None:
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    with TempPostgres() as pg:  # its own server: this test stops it
        url = pg.url(pg.create_database())
        server = ServerProc(
            tmp_path, database_url=url, admin_token=ADMIN_TOKEN, env={"JITGPU_RUN_JOBS": "false"}
        ).start()
        try:
            server.wait_ready()
            headers = _tenant(server, gpus=8)
            with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
                assert http.post("/v1/allocations", json={"gpu_count": 1}).status_code == 201
                pg.pause()
                down = http.post("/v1/allocations", json={"gpu_count": 1})
                assert down.status_code == 503, down.text
                assert down.json()["error"]["code"] == "database_unavailable"
                assert http.get("/readyz").status_code == 503
                pg.resume()
                wait_for(
                    lambda: http.get("/readyz").status_code == 200,
                    timeout=30,
                    what="readiness after the database came back",
                )
                assert http.post("/v1/allocations", json={"gpu_count": 1}).status_code == 201
                assert len(http.get("/v1/allocations").json()) == 2
        finally:
            server.stop()
        assert "Traceback" not in server.output()


def test_two_replicas_leader_killed_other_takes_the_jobs(
    pg_server: TempPostgres | None, tmp_path: Path
) -> None:
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    url = pg_server.url(pg_server.create_database())
    interval = 1.0
    env = {"JITGPU_JOBS_INTERVAL_S": str(interval), "JITGPU_HEARTBEAT_TIMEOUT_S": "3600"}
    replicas = [
        ServerProc(
            tmp_path, database_url=url, admin_token=ADMIN_TOKEN, env=env, name=f"replica{i}"
        ).start()
        for i in range(2)
    ]
    db = Database(url)
    try:
        for r in replicas:
            r.wait_ready()
        headers = _tenant(replicas[0])
        holder = wait_for(lambda: leader.holder_of(db), timeout=10, what="a jobs leader")
        pids = {r.pid: r for r in replicas}
        lead = pids[int(holder[0].split(":")[1])]
        other = next(r for r in replicas if r is not lead)
        acked: list = []
        stop, lock = threading.Event(), threading.Lock()
        threads = [
            threading.Thread(
                target=_load, args=([r.url for r in replicas], headers, stop, acked, lock)
            )
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 30, timeout=30, what="load through both replicas")
        lead.kill9()
        killed_at = time.monotonic()
        taken = wait_for(
            lambda: (h := leader.holder_of(db)) and int(h[0].split(":")[1]) == other.pid,
            timeout=10 * interval,
            what="the other replica taking over the jobs",
        )
        took = time.monotonic() - killed_at
        count = len(acked)
        wait_for(lambda: len(acked) >= count + 30, timeout=30, what="load after the takeover")
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert taken and took <= 2 * interval + 0.5, f"takeover took {took:.2f}s"
    finally:
        for r in replicas:
            r.stop()
        db.dispose()
    _check_database(url, acked)


def test_second_server_on_one_sqlite_file_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jitgpu.db'}"
    first = ServerProc(tmp_path, database_url=url, admin_token=ADMIN_TOKEN).start()
    try:
        first.wait_ready()
        second = ServerProc(
            tmp_path, database_url=url, admin_token=ADMIN_TOKEN, name="second"
        ).start()
        try:
            second.wait_ready()
            wait_for(
                lambda: "SQLite supports one replica" in second.output(),
                timeout=10,
                what="the single-replica warning",
            )
        finally:
            second.stop()
        assert "SQLite supports one replica" not in first.output()
    finally:
        first.stop()
