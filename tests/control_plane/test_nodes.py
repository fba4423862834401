"""Nodes on both databases: re-registration, changed GPUs, flapping, and oversized input."""

from __future__ import annotations

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.registry import liveness
from tests.control_plane.conftest import ADMIN, Api
from tests.support.state import assignment_state


def _gpus(api: Api) -> dict[str, dict]:
    return {g["uuid"]: g for g in api.http.get("/v1/gpus", headers=ADMIN).json()}


def test_registering_again_updates_in_place(api: Api) -> None:
    first = api.node("n1", gpus=4, leaf="leaf0")
    again = api.node("n1", gpus=4, leaf="leaf3")
    assert again["id"] == first["id"] and again["leaf"] == "leaf3"
    assert len(_gpus(api)) == 4
    assert len(api.http.get("/v1/nodes", headers=ADMIN).json()) == 1


def test_reregistering_with_changed_gpus_fails_what_the_lost_gpu_held(api: Api) -> None:
    node = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).json()
    lost = alloc["gpus"][0]["uuid"]
    kept = next(u for u in _gpus(api) if u != lost)
    body = {
        "name": "n1",
        "gpus": [
            {"uuid": kept, "model": "A100", "memory_mb": 81920, "index": 0},
            {"uuid": "GPU-new", "model": "A100", "memory_mb": 81920, "index": 1},
        ],
    }
    assert api.http.post("/v1/nodes", json=body, headers=ADMIN).json()["id"] == node["id"]
    after = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert after["status"] == "lost" and "no longer reported" in after["reason"]
    assert set(_gpus(api)) == {kept, "GPU-new"}
    # The new GPU is placeable at once.
    assert (
        api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).status_code == 201
    )


def test_the_same_gpu_twice_in_one_registration_is_refused(api: Api) -> None:
    body = {"name": "n1", "gpus": [{"uuid": "G", "model": "A100", "memory_mb": 1}] * 2}
    r = api.http.post("/v1/nodes", json=body, headers=ADMIN)
    assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate_gpu"


def test_flapping_node_goes_offline_and_comes_back(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    node = api.node("n1", gpus=2)
    path = f"/v1/nodes/{node['id']}/heartbeat"
    for _ in range(3):
        liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1))
        status = api.http.get(f"/v1/nodes/{node['id']}", headers=ADMIN).json()["status"]
        assert status == "offline"
        assert api.http.post(path, json={}, headers=ADMIN).json()["status"] == "online"
    events = api.http.get("/v1/events", params={"object_id": node["id"]}, headers=ADMIN).json()
    assert [e["to_state"] for e in events] == ["registering", "online"] + ["offline", "online"] * 3
    _, headers = api.tenant(quota=2)
    assert (
        api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).status_code == 201
    )


def test_heartbeat_of_an_unknown_node_is_404(api: Api) -> None:
    r = api.http.post("/v1/nodes/node_0000000000000000/heartbeat", json={}, headers=ADMIN)
    assert r.status_code == 404


def test_oversized_body_is_413_and_changes_nothing(api: Api) -> None:
    _, headers = api.tenant()
    huge = b'{"gpu_count": 1, "label": "' + b"x" * 2_000_000 + b'"}'
    r = api.http.post(
        "/v1/allocations", content=huge, headers={**headers, "content-type": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert api.http.get("/v1/allocations", headers=headers).json() == []


def test_overlong_strings_and_huge_integers_are_422(api: Api) -> None:
    _, headers = api.tenant()
    for body in (
        {"gpu_count": 2**40},
        {"gpu_count": 1, "gpu_model": "x" * 65},
        {"gpu_count": 1, "lease_s": -1},
    ):
        assert api.http.post("/v1/allocations", json=body, headers=headers).status_code == 422
    big = {"name": "n" * 65, "gpus": []}
    assert api.http.post("/v1/nodes", json=big, headers=ADMIN).status_code == 422


def test_a_node_cannot_report_on_a_hold_that_moved_away(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    first = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=4)
    body = {"gpu_count": 2, "ttl_s": 3600, "warmup": "default"}
    hold = api.http.post("/v1/holds", json=body, headers=headers).json()
    api.clock.advance(10)
    second = api.node("n2", gpus=2)
    api.clock.advance(settings.heartbeat_timeout_s - 5)
    api.http.post(f"/v1/nodes/{second['id']}/heartbeat", json={}, headers=ADMIN)
    assert liveness(api.writer, settings, api.clock.now) == 1
    failure = {"ok": False, "warmup_s": 3.0, "exit_code": 1, "output_tail": "late"}
    late = api.http.post(
        f"/v1/nodes/{first['id']}/holds/{hold['id']}/warmup", json=failure, headers=ADMIN
    )
    assert late.status_code == 404
    still = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert still["status"] == "placed" and [g["node"] for g in still["gpus"]] == ["n2", "n2"]
    # Its new node reports as usual; claimed mid-warm-up, the report makes the claim ready.
    path = f"/v1/nodes/{second['id']}/holds/{hold['id']}/warmup"
    started = {"ok": True, "warmup_s": 0.0, "started": True}
    assert api.http.post(path, json=started, headers=ADMIN).json()["status"] == "warming"
    alloc = api.http.post(f"/v1/holds/{hold['id']}/claim", json={}, headers=headers).json()
    assert alloc["ready_at"] is None
    ok = {"ok": True, "warmup_s": 2.0}
    assert api.http.post(path, json=ok, headers=ADMIN).status_code == 200
    ready = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert ready["ready_at"] is not None


def _sick(uuid: str, reason: str = "Xid 79") -> dict:
    return {"gpus": [{"uuid": uuid, "healthy": False, "reason": reason}]}


def test_a_hold_on_a_gpu_gone_unhealthy_moves_and_its_claim_gets_healthy_gpus(api: Api) -> None:
    first = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=4)
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers).json()
    assert hold["status"] == "ready"
    second = api.node("n2", gpus=2)
    path = f"/v1/nodes/{first['id']}/heartbeat"
    assert api.http.post(path, json=_sick("GPU-n1-1"), headers=ADMIN).status_code == 200
    moved = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert moved["status"] == "ready"
    assert [g["node_id"] for g in moved["gpus"]] == [second["id"]] * 2
    alloc = api.http.post(f"/v1/holds/{hold['id']}/claim", json={}, headers=headers).json()
    assert sorted(g["uuid"] for g in alloc["gpus"]) == ["GPU-n2-0", "GPU-n2-1"]
    events = api.http.get("/v1/events", params={"object_id": hold["id"]}, headers=ADMIN).json()
    assert any("GPU GPU-n1-1 unhealthy: Xid 79" in (e["reason"] or "") for e in events)


def test_a_hold_on_a_gpu_gone_unhealthy_fails_when_nothing_else_fits(api: Api) -> None:
    node = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers).json()
    api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json=_sick("GPU-n1-0"), headers=ADMIN)
    failed = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert failed["status"] == "failed"
    assert failed["reason"] == "GPU GPU-n1-0 unhealthy: Xid 79; no capacity to re-place it"
    claim = api.http.post(f"/v1/holds/{hold['id']}/claim", json={}, headers=headers)
    assert claim.status_code == 409
    assert _gpus(api)["GPU-n1-1"]["assigned_to"] is None


def test_an_allocation_on_a_gpu_gone_unhealthy_keeps_running_with_an_event(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).json()
    api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json=_sick("GPU-n1-0"), headers=ADMIN)
    after = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert after["status"] == "allocated" and after["gpus"] == alloc["gpus"]
    events = api.http.get("/v1/events", params={"object_id": alloc["id"]}, headers=ADMIN).json()
    last = events[-1]
    assert (last["from_state"], last["to_state"]) == ("allocated", "allocated")
    assert last["reason"] == "GPU GPU-n1-0 unhealthy: Xid 79"


def test_heartbeats_never_change_assignment_state(api: Api, db: Database) -> None:
    node = api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    warming = {"gpu_count": 1, "ttl_s": 3600, "warmup": "default"}
    assert api.http.post("/v1/holds", json=warming, headers=headers).json()["status"] == "placed"
    ready = {"gpu_count": 1, "ttl_s": 3600}
    assert api.http.post("/v1/holds", json=ready, headers=headers).json()["status"] == "ready"
    body = {"gpu_count": 2, "use_holds": False, "command": ["true"]}
    assert api.http.post("/v1/allocations", json=body, headers=headers).status_code == 201
    before = assignment_state(db)
    path = f"/v1/nodes/{node['id']}/heartbeat"
    telemetry = {
        "gpus": [
            {"uuid": f"GPU-n1-{i}", "healthy": True, "temperature_c": 40.0, "utilization_pct": 0.0}
            for i in range(4)
        ],
        "host": {"cpu_pct": 3.0, "memory_pct": 20.0},
    }
    # Telemetry only, an agent that reports no work of its own, a drain and its end.
    for beat in (telemetry, {}, {**telemetry, "draining": True}, {"draining": False}):
        api.clock.advance(1)
        reply = api.http.post(path, json=beat, headers=ADMIN)
        assert reply.status_code == 200, reply.text
        assert len(reply.json()["assignments"]) == 3
    buffer = api.http.app.state.heartbeats
    if buffer is not None:
        buffer.flush(api.writer)
    assert assignment_state(db) == before
