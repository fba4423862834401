"""Liveness cannot punish nodes for the server's own stall, and a node back within the lease
gets its allocations back instead of having its tasks killed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.models import TenantRow
from control_plane.jobs.registry import Job, liveness
from control_plane.jobs.runner import JobRunner
from control_plane.jobs.stalls import StallWatch
from tests.conftest import FakeClock
from tests.control_plane.conftest import ADMIN, Api
from tests.e2e.test_node_agents import start_agent
from tests.support.nodes import enrol_token
from tests.support.pg import free_port
from tests.support.procs import Proc, ServerProc, wait_for


def test_the_watch_measures_stalls_and_grants_a_full_grace() -> None:
    clock = FakeClock(start=0.0)
    watch = StallWatch(threshold_s=2.0, clock=clock)
    watch.expect("event loop", 0.25)
    for _ in range(20):
        clock.advance(0.25)
        watch.beat("event loop")
    assert watch.stalled_now() is None and watch.grace_left(15.0) == 0.0
    clock.advance(2.0)  # late, but within the threshold: no stall
    assert watch.stalled_now() is None
    clock.advance(8.0)
    # Overdue now: the whole grace is owed while it lasts.
    assert watch.stalled_now() == "event loop" and watch.grace_left(15.0) == 15.0
    watch.beat("event loop")
    assert watch.stalls == [("event loop", 10.0)]
    clock.advance(5.0)
    watch.beat("event loop")  # (a 5 s gap again: the clock moved in one step)
    clock.advance(0.25)
    watch.beat("event loop")
    assert watch.grace_left(15.0) == pytest.approx(14.75)
    for _ in range(60):  # 15 s of regular beats: the grace runs out
        clock.advance(0.25)
        watch.beat("event loop")
    assert watch.grace_left(15.0) == 0.0
    assert [part for part, _ in watch.stalls] == ["event loop"] * 2


def _leader(db: Database, settings: ServerSettings, clock: FakeClock, watch: StallWatch):  # type: ignore[no-untyped-def]
    runner = JobRunner(db, settings=settings, clock=clock, watch=watch)
    runner.renew()
    assert runner.is_leader
    runner._leader_since = clock.now - 1000  # long past its election grace
    return runner


def test_liveness_skips_while_the_server_stalled_then_judges_again(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).json()
    mono = FakeClock(start=0.0)
    watch = StallWatch(threshold_s=2.0, clock=mono)
    watch.expect("event loop", 0.25)
    runner = _leader(db, settings, api.clock, watch)
    job = Job("liveness", liveness, stall_aware=True)
    # The event loop froze (a huge request, say) for longer than the heartbeat timeout: no
    # heartbeat could be taken, so the silence is the server's.
    api.clock.advance(settings.heartbeat_timeout_s + 5)
    mono.advance(settings.heartbeat_timeout_s + 5)
    runner._run(job)
    node = api.http.get("/v1/nodes", headers=ADMIN).json()[0]
    assert node["status"] == "online"
    # The loop is back: the node gets a whole timeout from then, not from its last heartbeat.
    watch.beat("event loop")
    for _ in range(int(settings.heartbeat_timeout_s) - 1):
        api.clock.advance(1)
        mono.advance(1)
        watch.beat("event loop")
        runner.renew()
        runner._run(job)
    assert api.http.get("/v1/nodes", headers=ADMIN).json()[0]["status"] == "online"
    got = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert got["status"] == "allocated"
    # A node that stays silent through the whole grace does go offline.
    api.clock.advance(2)
    mono.advance(2)
    watch.beat("event loop")
    runner.renew()
    runner._run(job)
    assert api.http.get("/v1/nodes", headers=ADMIN).json()[0]["status"] == "offline"


def _lose(api: Api, db: Database, settings: ServerSettings, **body: object) -> tuple[dict, dict]:
    node = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    allocated_at = api.clock.now
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1, **body}, headers=headers).json()
    assert alloc["status"] == "allocated"
    liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1))
    lost = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert lost["status"] == "lost"
    return node, {"alloc": alloc, "headers": headers, "alloc_at": allocated_at}


def test_a_node_back_within_the_lease_gets_its_allocations_back(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    node, ctx = _lose(api, db, settings, lease_s=3600)
    api.clock.advance(5)
    r = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=ADMIN)
    assert r.status_code == 200
    # The first reply already names the allocation: the agent keeps its task running.
    assert [a["id"] for a in r.json()["assignments"]] == [ctx["alloc"]["id"]]
    back = api.http.get(f"/v1/allocations/{ctx['alloc']['id']}", headers=ctx["headers"]).json()
    assert back["status"] == "allocated" and back["released_at"] is None
    assert [g["uuid"] for g in back["gpus"]] == [g["uuid"] for g in ctx["alloc"]["gpus"]]
    assert "came back within the lease" in back["reason"]
    events = api.http.get(f"/v1/events?object_id={back['id']}", headers=ADMIN).json()
    assert [e["to_state"] for e in events][-2:] == ["lost", "allocated"]
    # Its GPU is taken again: nobody else can be placed on it.
    gpus = {g["uuid"]: g for g in api.http.get("/v1/gpus", headers=ADMIN).json()}
    assert gpus[back["gpus"][0]["uuid"]]["assigned_to"] == back["id"]
    # The usage charged at the loss is taken back: the release charges the whole run once.
    with db.read() as session:
        tenant = session.get(TenantRow, back["tenant_id"])
        assert tenant is not None and tenant.usage_gpu_s == pytest.approx(0.0, abs=1e-6)
    api.clock.advance(100)
    api.http.delete(f"/v1/allocations/{back['id']}", headers=ctx["headers"])
    ran = api.clock.now - ctx["alloc_at"]
    with db.read() as session:
        tenant = session.get(TenantRow, back["tenant_id"])
        assert tenant is not None
        assert tenant.usage_gpu_s == pytest.approx(ran, rel=0.01)  # decayed a little


def test_after_the_lease_the_allocation_stays_lost(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    node, ctx = _lose(api, db, settings, lease_s=20)
    api.clock.advance(10)
    api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=ADMIN)
    got = api.http.get(f"/v1/allocations/{ctx['alloc']['id']}", headers=ctx["headers"]).json()
    assert got["status"] == "lost"


def test_an_allocation_across_nodes_returns_only_when_all_its_nodes_are_back(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    first, second = api.node("n1", gpus=1), api.node("n2", gpus=1)
    _, headers = api.tenant(quota=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).json()
    assert {g["node"] for g in alloc["gpus"]} == {"n1", "n2"}
    liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1))

    def status() -> str:
        return api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()["status"]

    assert status() == "lost"
    api.clock.advance(1)
    api.http.post(f"/v1/nodes/{first['id']}/heartbeat", json={}, headers=ADMIN)
    assert status() == "lost"  # half a job is no job: n2 is still away
    api.clock.advance(1)
    api.http.post(f"/v1/nodes/{second['id']}/heartbeat", json={}, headers=ADMIN)
    assert status() == "allocated"


@pytest.mark.e2e
def test_a_frozen_server_does_not_take_its_nodes_offline_when_it_wakes(tmp_path: Path) -> None:
    """The whole server process is stopped (SIGSTOP) for twice the heartbeat timeout while a
    real node agent runs a task; when it resumes, every heartbeat looks overdue, and yet no
    node goes offline and no job is lost (the lease lapsed too, so the election grace holds
    liveness back as well as the stall watch; the next test freezes the loop alone)."""
    timeout_s = 3.0
    server = ServerProc(
        tmp_path,
        admin_token="stall-admin-token-0123456789abcdef",
        env={"JITGPU_HEARTBEAT_TIMEOUT_S": str(timeout_s), "JITGPU_JOBS_INTERVAL_S": "0.5"},
    ).start()
    procs: list[Proc] = [server]
    try:
        server.wait_ready()
        admin = server.admin()
        agent = start_agent(
            tmp_path, server, enrol_token(admin, "node-a", {}), "node-a", 1, "leaf0"
        )
        procs.append(agent)
        wait_for(
            lambda: [n for n in admin.get("/v1/nodes").json() if n["status"] == "online"],
            timeout=30,
            what="node-a online",
        )
        tenant = admin.post("/v1/tenants", json={"name": "t", "quota_gpus": 1}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        user = server.admin()
        user.headers["Authorization"] = f"Bearer {key}"
        command = [sys.executable, "-c", "import time; time.sleep(600)"]
        alloc = user.post("/v1/allocations", json={"gpu_count": 1, "command": command}).json()

        def task() -> str | None:
            return user.get(f"/v1/allocations/{alloc['id']}").json()["task_status"]

        wait_for(lambda: task() == "running", timeout=30, what="the task to run")

        os.kill(server.pid, signal.SIGSTOP)
        try:
            time.sleep(2 * timeout_s + 1)  # the stall itself: real time is what is tested
        finally:
            os.kill(server.pid, signal.SIGCONT)
        time.sleep(timeout_s + 1)  # long enough for a wrongful verdict to have been made

        node = admin.get("/v1/nodes").json()[0]
        events = admin.get("/v1/events", params={"object_id": node["id"]}).json()
        assert [e for e in events if e["to_state"] == "offline"] == []
        assert node["status"] == "online"
        after = user.get(f"/v1/allocations/{alloc['id']}").json()
        assert after["status"] == "allocated" and after["task_status"] == "running"
        assert "stalled for" in server.output()  # the stall was measured and said
    finally:
        for p in reversed(procs):
            p.stop()


@pytest.mark.e2e
def test_a_frozen_event_loop_does_not_take_nodes_offline(tmp_path: Path) -> None:
    """The case of a huge request before the transport guard: the event loop stops answering
    heartbeats while the job thread runs on. Liveness must see that the silence is the
    server's own. Real uvicorn, real job runner; the loop is frozen by a blocking call in it."""
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'jitgpu.db'}",
        admin_token="loop-admin-token-0123456789abcdef",
        heartbeat_timeout_s=3.0,
        jobs_interval_s=0.5,
    )
    db = Database(settings.database_url)
    app = create_app(settings, db=db)
    loops: list[asyncio.AbstractEventLoop] = []

    async def recording(scope, receive, send):  # type: ignore[no-untyped-def]
        if not loops:
            loops.append(asyncio.get_running_loop())
        await app(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    headers = {"Authorization": f"Bearer {settings.admin_token}"}
    stop = threading.Event()
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30)
        wait_for(lambda: http.get("/readyz").status_code == 200, timeout=20, what="server")
        node = http.post(
            "/v1/nodes",
            json={"name": "n1", "gpus": [{"uuid": "GPU-1", "model": "A100", "memory_mb": 1}]},
        ).json()
        tenant = http.post("/v1/tenants", json={"name": "t", "quota_gpus": 1}).json()
        key = http.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        user = {"Authorization": f"Bearer {key}"}
        alloc = http.post("/v1/allocations", json={"gpu_count": 1}, headers=user).json()

        def beat() -> None:
            with httpx.Client(base_url=http.base_url, headers=headers, timeout=30) as h:
                while not stop.is_set():
                    h.post(f"/v1/nodes/{node['id']}/heartbeat", json={})
                    time.sleep(0.3)

        beater = threading.Thread(target=beat)
        beater.start()
        time.sleep(1.0)
        # Freeze the event loop for twice the heartbeat timeout (the job thread runs on).
        loops[0].call_soon_threadsafe(time.sleep, 7.0)
        time.sleep(7.0 + 4.0)  # the freeze, then more than a timeout to judge it wrongly
        stop.set()
        beater.join(timeout=30)
        events = http.get("/v1/events", params={"object_id": node["id"]}).json()
        assert [e for e in events if e["to_state"] == "offline"] == []
        got = http.get(f"/v1/allocations/{alloc['id']}", headers=user).json()
        assert got["status"] == "allocated"
        assert any(part == "event loop" for part, _ in app.state.stall_watch.stalls)
    finally:
        stop.set()
        server.should_exit = True
        thread.join(timeout=15)
        db.dispose()
