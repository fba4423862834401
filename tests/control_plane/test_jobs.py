"""Periodic jobs with a fixed `now`, on both databases: expiry, activation, liveness, leases."""

from __future__ import annotations

import pytest

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.registry import hold_lifecycle, liveness, retention
from control_plane.services import leases as leader
from tests.control_plane.conftest import ADMIN, Api
from tests.support.state import ASSIGNMENT_TABLES, assignment_state


@pytest.fixture
def settings(settings: ServerSettings) -> ServerSettings:
    """The tests here flush the heartbeat buffer themselves. The app's own flusher runs every
    heartbeat_flush_s of real time: a minute here, so it cannot write the buffer between a
    test's heartbeat and its flush on a slow machine."""
    return settings.model_copy(update={"heartbeat_flush_s": 60.0})


def _status(api: Api, path: str, headers: dict) -> str:
    return api.http.get(path, headers=headers).json()["status"]


def test_unclaimed_hold_expires_at_start_plus_ttl(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 100}, headers=headers).json()
    path = f"/v1/holds/{hold['id']}"
    assert hold_lifecycle(api.writer, settings, api.clock.advance(99)) == 0
    assert _status(api, path, headers) == "ready"
    assert hold_lifecycle(api.writer, settings, api.clock.advance(1)) == 1
    expired = api.http.get(path, headers=headers).json()
    assert expired["status"] == "expired"
    assert "ttl" in expired["reason"]
    assert api.http.get("/v1/gpus", headers=ADMIN).json()[0]["assigned_to"] is None


def test_allocation_expires_at_lease_end(api: Api, db: Database, settings: ServerSettings) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "lease_s": 60}, headers=headers
    ).json()
    hold_lifecycle(api.writer, settings, api.clock.advance(59))
    assert _status(api, f"/v1/allocations/{alloc['id']}", headers) == "allocated"
    hold_lifecycle(api.writer, settings, api.clock.advance(1))
    assert _status(api, f"/v1/allocations/{alloc['id']}", headers) == "expired"


def test_future_hold_is_placed_at_start_minus_lead(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    hold = api.http.post(
        "/v1/holds",
        json={"gpu_count": 2, "ttl_s": 600, "start_in_s": 300, "lead_s": 120},
        headers=headers,
    ).json()
    path = f"/v1/holds/{hold['id']}"
    hold_lifecycle(api.writer, settings, api.clock.advance(179))
    assert _status(api, path, headers) == "requested"
    hold_lifecycle(api.writer, settings, api.clock.advance(1))
    placed = api.http.get(path, headers=headers).json()
    assert placed["status"] == "ready" and len(placed["gpus"]) == 2


def test_silent_node_goes_offline_and_its_hold_moves(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    first = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=4)
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers).json()
    assert {g["node"] for g in hold["gpus"]} == {"n1"}
    alloc_first = hold  # the hold sits on n1; n2 joins later and keeps heartbeating
    api.clock.advance(10)
    second = api.node("n2", gpus=2)
    api.clock.advance(settings.heartbeat_timeout_s - 5)
    api.http.post(f"/v1/nodes/{second['id']}/heartbeat", json={}, headers=ADMIN)
    assert liveness(api.writer, settings, api.clock.now) == 1
    nodes = {n["name"]: n["status"] for n in api.http.get("/v1/nodes", headers=ADMIN).json()}
    assert nodes == {"n1": "offline", "n2": "online"}
    moved = api.http.get(f"/v1/holds/{alloc_first['id']}", headers=headers).json()
    assert moved["status"] == "ready"
    # Only the GPUs it has now, not the ones it lost.
    assert [g["node_id"] for g in moved["gpus"]] == [second["id"]] * 2
    # Once ended, a hold still names the last GPUs it had.
    cancelled = api.http.delete(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert cancelled["status"] == "cancelled"
    assert [g["uuid"] for g in cancelled["gpus"]] == [g["uuid"] for g in moved["gpus"]]
    assert api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json() == cancelled
    # A heartbeat brings the node back online; its GPUs are free again.
    api.http.post(f"/v1/nodes/{first['id']}/heartbeat", json={}, headers=ADMIN)
    nodes = {n["name"]: n["status"] for n in api.http.get("/v1/nodes", headers=ADMIN).json()}
    assert nodes["n1"] == "online"


def test_silent_node_loses_its_allocations(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).json()
    liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1))
    lost = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert lost["status"] == "lost" and "offline" in lost["reason"]


def test_retention_prunes_old_events_only(api: Api, db: Database, settings: ServerSettings) -> None:
    _tenant_id, headers = api.tenant()
    before = len(api.http.get("/v1/events", headers=ADMIN).json())
    api.clock.advance(settings.retention_days * 86400 + 1)
    api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers)
    assert retention(api.writer, settings, api.clock.now) >= before
    kinds = [e["to_state"] for e in api.http.get("/v1/events", headers=ADMIN).json()]
    assert kinds == ["pending"]


def test_leader_lease_one_holder_and_takeover(db: Database) -> None:
    assert leader.acquire(db, holder="a", now=100.0, ttl_s=3.0)
    assert not leader.acquire(db, holder="b", now=101.0, ttl_s=3.0)
    assert leader.acquire(db, holder="a", now=102.0, ttl_s=3.0)  # renewal
    assert not leader.acquire(db, holder="b", now=104.9, ttl_s=3.0)
    assert leader.acquire(db, holder="b", now=105.1, ttl_s=3.0)  # a died: b takes over
    assert leader.holder_of(db) == ("b", 108.1)
    leader.release(db, holder="b")
    assert leader.acquire(db, holder="a", now=105.2, ttl_s=3.0)


def test_hold_lost_before_warming_is_replaced_and_stays_placed(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=4)
    hold = api.http.post(
        "/v1/holds", json={"gpu_count": 2, "ttl_s": 3600, "warmup": "default"}, headers=headers
    ).json()
    assert hold["status"] == "placed"
    api.clock.advance(10)
    second = api.node("n2", gpus=2)
    api.clock.advance(settings.heartbeat_timeout_s - 5)
    api.http.post(f"/v1/nodes/{second['id']}/heartbeat", json={}, headers=ADMIN)
    assert liveness(api.writer, settings, api.clock.now) == 1
    moved = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert moved["status"] == "placed"
    assert [g["node"] for g in moved["gpus"]] == ["n2", "n2"]


def test_liveness_waits_one_timeout_after_an_election(
    db: Database, settings: ServerSettings
) -> None:
    from control_plane.jobs.registry import Job
    from control_plane.jobs.runner import JobRunner
    from tests.conftest import FakeClock

    clock = FakeClock()
    runs: list[float] = []
    runner = JobRunner(db, settings=settings, clock=clock)
    job = Job(
        "liveness", lambda _db, _settings, now: runs.append(now) or 0, after_election_grace=True
    )
    runner.renew()
    assert runner.is_leader
    for _ in range(int(settings.heartbeat_timeout_s)):
        runner._run(job)
        clock.advance(1)
        runner.renew()  # renewed every second, as the scheduler does every half interval
    assert runs == []
    runner._run(job)
    assert runs == [clock.now]


def test_heartbeats_are_written_behind_and_state_changes_at_once(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    from control_plane.db.models import NodeRow

    node = api.node("n1", gpus=2)
    buffer = api.http.app.state.heartbeats
    registered = node["last_heartbeat_at"]
    api.clock.advance(5)
    body = {"gpus": [{"uuid": "GPU-n1-0", "healthy": True, "temperature_c": 41.5}]}
    reply = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json=body, headers=ADMIN)
    assert reply.status_code == 200 and reply.json()["status"] == "online"
    assert (
        api.http.get(f"/v1/nodes/{node['id']}", headers=ADMIN).json()["last_heartbeat_at"]
        == registered
    )  # not yet written
    assert buffer.flush(api.writer) == 1
    with db.read() as session:
        row = session.get(NodeRow, node["id"])
        assert row.last_heartbeat_at == api.clock.now and "41.5" in row.telemetry_json
    # A GPU going unhealthy is a state change: written at once, out of placement at once.
    sick = {"gpus": [{"uuid": "GPU-n1-1", "healthy": False, "reason": "Xid 79"}]}
    api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json=sick, headers=ADMIN)
    assert len(buffer) == 0
    gpus = {g["uuid"]: g["healthy"] for g in api.http.get("/v1/gpus", headers=ADMIN).json()}
    assert gpus == {"GPU-n1-0": True, "GPU-n1-1": False}
    # An older buffered heartbeat never overwrites a newer time.
    buffer.put(node["id"], api.clock.now - 100, "{}")
    buffer.flush(api.writer)
    with db.read() as session:
        assert session.get(NodeRow, node["id"]).last_heartbeat_at == api.clock.now


def test_liveness_never_replaces_a_hold_onto_the_dead_node_with_a_warm_view(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    nodes = {n["id"]: n["name"] for n in (api.node("n1", gpus=2), api.node("n2", gpus=2))}
    _, headers = api.tenant(quota=4)
    # Placed after the last registration: the cached cluster view is warm when liveness runs.
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers).json()
    (dead,) = {g["node_id"] for g in hold["gpus"]}
    (alive,) = set(nodes) - {dead}
    api.clock.advance(settings.heartbeat_timeout_s + 1)
    api.http.post(f"/v1/nodes/{alive}/heartbeat", json={}, headers=ADMIN)
    api.http.app.state.heartbeats.flush(api.writer)
    assert liveness(api.writer, settings, api.clock.now) == 1
    moved = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert moved["status"] == "ready"
    active = [g for g in api.http.get("/v1/gpus", headers=ADMIN).json() if g["assigned_to"]]
    assert [g["node_id"] for g in active] == [alive, alive]
    assert {g["assigned_to"] for g in active} == {hold["id"]}


def test_liveness_fails_a_hold_it_cannot_replace_and_says_why(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers).json()
    assert liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1)) == 1
    failed = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert failed["status"] == "failed"
    assert failed["reason"] == "node n1 went offline; no capacity to re-place it"
    assert all(g["assigned_to"] is None for g in api.http.get("/v1/gpus", headers=ADMIN).json())


def test_liveness_lets_the_most_confident_hold_choose_first_across_dead_nodes(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    _, headers = api.tenant(quota=4)

    def hold_on(node: str, confidence: float) -> dict:
        # One single-GPU node registered at a time: the hold can only land on it.
        node_id = api.node(node, gpus=1)["id"]
        body = {"gpu_count": 1, "ttl_s": 3600, "confidence": confidence}
        made = api.http.post("/v1/holds", json=body, headers=headers).json()
        assert made["gpus"][0]["node_id"] == node_id
        return made

    # The weak hold's node goes offline first (by name): per node, it would choose first.
    weak, strong = hold_on("n1", 0.2), hold_on("n2", 0.9)
    spare = api.node("n3", gpus=1)["id"]
    api.clock.advance(settings.heartbeat_timeout_s + 1)
    api.http.post(f"/v1/nodes/{spare}/heartbeat", json={}, headers=ADMIN)
    api.http.app.state.heartbeats.flush(api.writer)
    assert liveness(api.writer, settings, api.clock.now) == 2
    moved = api.http.get(f"/v1/holds/{strong['id']}", headers=headers).json()
    assert moved["status"] == "ready" and moved["gpus"][0]["node_id"] == spare
    failed = api.http.get(f"/v1/holds/{weak['id']}", headers=headers).json()
    assert failed["status"] == "failed" and "no capacity" in failed["reason"]


def _world(db: Database) -> dict[str, list[dict]]:
    """Everything a job may change: assignment state, nodes, GPUs, events, idempotency keys."""
    from control_plane.db.models import EventRow, GpuRow, IdempotencyRow, NodeRow

    extra = (NodeRow, GpuRow, EventRow, IdempotencyRow)
    return assignment_state(db, (*ASSIGNMENT_TABLES, *extra))


def test_every_job_run_twice_at_the_same_now_changes_nothing_the_second_time(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    from control_plane.jobs.registry import JOBS

    def post(kind: str, body: dict) -> str:
        r = api.http.post(f"/v1/{kind}", json=body, headers=headers)
        assert r.status_code in (201, 202), r.text
        return r.json()["id"]

    def status(kind: str, object_id: str) -> str:
        return _status(api, f"/v1/{kind}/{object_id}", headers)

    h100, a100 = {"gpu_model": "H100"}, {"gpu_model": "A100"}
    api.node("n1", gpus=2, model="H100")
    _, headers = api.tenant(quota=8)
    moves = post("holds", {"gpu_count": 1, "ttl_s": 3600, **h100})  # re-placed when n1 dies
    lost = post("allocations", {"gpu_count": 1, "use_holds": False, **h100})
    api.clock.advance(10)
    alive = [api.node("n2", gpus=4), api.node("n3", gpus=2, model="H100")]
    expires = post("holds", {"gpu_count": 1, "ttl_s": 20, **h100})
    leases = [post("allocations", {"gpu_count": 1, "lease_s": 20, **a100}) for _ in range(2)]
    due = post("holds", {"gpu_count": 1, "ttl_s": 600, "start_in_s": 100, "lead_s": 80, **h100})
    queued = post("allocations", {"gpu_count": 4, **a100})  # fits once the leases end
    assert (status("holds", due), status("allocations", queued)) == ("requested", "pending")
    api.clock.advance(15)
    for node in alive:
        api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=ADMIN)
    if api.http.app.state.heartbeats is not None:
        api.http.app.state.heartbeats.flush(api.writer)
    now = api.clock.advance(5)
    # A short retention, so that the events before this pass are due for pruning.
    settings = settings.model_copy(update={"retention_days": 20 / 86400})
    for job in JOBS:
        assert job.run(api.writer, settings, now) > 0, f"{job.name} had nothing to do"
        before = _world(db)
        assert job.run(api.writer, settings, now) == 0, f"{job.name} changed something again"
        assert _world(db) == before, job.name
    assert [status("holds", h) for h in (moves, expires, due)] == ["ready", "expired", "ready"]
    assert [status("allocations", a) for a in (lost, *leases, queued)] == [
        "lost",
        "expired",
        "expired",
        "allocated",
    ]
