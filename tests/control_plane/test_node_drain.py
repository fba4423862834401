"""Drain as a command of the control plane, on both databases: what it stops, what goes on."""

from __future__ import annotations

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.registry import hold_lifecycle, liveness
from tests.control_plane.conftest import ADMIN, Api


def _status(api: Api, node_id: str) -> str:
    return api.http.get(f"/v1/nodes/{node_id}", headers=ADMIN).json()["status"]


def test_a_drained_node_takes_nothing_new_keeps_its_work_and_stays_drained(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    node = api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 3600}, headers=headers)
    alloc = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "use_holds": False}, headers=headers
    )
    drained = api.http.post(f"/v1/nodes/{node['id']}/drain", headers=ADMIN)
    assert drained.status_code == 200 and drained.json()["status"] == "draining"
    # Its heartbeats (the agent itself is not draining) neither undo the drain nor end work.
    path = f"/v1/nodes/{node['id']}/heartbeat"
    for _ in range(2):
        reply = api.http.post(path, json={"draining": False}, headers=ADMIN).json()
        assert reply["status"] == "draining" and len(reply["assignments"]) == 2
    assert _status(api, node["id"]) == "draining"
    # Nothing new lands on it...
    queued = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "use_holds": False}, headers=headers
    )
    assert queued.status_code == 202
    later = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 3600}, headers=headers)
    assert later.json()["status"] == "requested"
    # ...while what it had goes on: the allocation runs and the warm hold can be claimed.
    assert (
        api.http.get(f"/v1/allocations/{alloc.json()['id']}", headers=headers).json()["status"]
        == "allocated"
    )
    claimed = api.http.post(f"/v1/holds/{hold.json()['id']}/claim", json={}, headers=headers)
    assert claimed.status_code == 201 and claimed.json()["gpus"] == hold.json()["gpus"]
    # Silent, it goes offline; back (heartbeat or registration) it is drained again.
    liveness(api.writer, settings, api.clock.advance(settings.heartbeat_timeout_s + 1))
    assert _status(api, node["id"]) == "offline"
    assert api.http.post(path, json={}, headers=ADMIN).json()["status"] == "draining"
    assert api.node("n1", gpus=4)["status"] == "draining"
    events = api.http.get("/v1/events", params={"object_id": node["id"]}, headers=ADMIN).json()
    assert [(e["to_state"], e["reason"]) for e in events][2:] == [
        ("draining", "drained by an administrator"),
        ("offline", "no heartbeat for 15s"),
        ("online", "heartbeat"),
        ("draining", "drained by an administrator"),
    ]
    # Undrained, it takes work again: the queued allocation is placed by the next pass.
    undrained = api.http.post(f"/v1/nodes/{node['id']}/undrain", headers=ADMIN)
    assert undrained.json()["status"] == "online"
    assert api.http.post(path, json={}, headers=ADMIN).json()["status"] == "online"
    hold_lifecycle(api.writer, settings, api.clock.now)
    placed = api.http.get(f"/v1/allocations/{queued.json()['id']}", headers=headers).json()
    assert placed["status"] == "allocated"


def test_drain_is_idempotent_admin_only_and_404_for_an_unknown_node(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant()
    path = f"/v1/nodes/{node['id']}/drain"
    assert api.http.post(path, headers=headers).status_code == 403
    for _ in range(2):
        assert api.http.post(path, headers=ADMIN).json()["status"] == "draining"
    events = api.http.get("/v1/events", params={"object_id": node["id"]}, headers=ADMIN).json()
    assert [e["to_state"] for e in events] == ["registering", "online", "draining"]
    for _ in range(2):
        r = api.http.post(f"/v1/nodes/{node['id']}/undrain", headers=ADMIN)
        assert r.json()["status"] == "online"
    assert api.http.post("/v1/nodes/node_0000000000000000/drain", headers=ADMIN).status_code == 404


def test_an_agent_drain_ends_with_its_heartbeats_but_an_admin_drain_does_not(api: Api) -> None:
    node = api.node("n1", gpus=1)
    path = f"/v1/nodes/{node['id']}/heartbeat"
    assert (
        api.http.post(path, json={"draining": True}, headers=ADMIN).json()["status"] == "draining"
    )
    assert api.http.post(path, json={}, headers=ADMIN).json()["status"] == "online"
    api.http.post(f"/v1/nodes/{node['id']}/drain", headers=ADMIN)
    assert (
        api.http.post(path, json={"draining": True}, headers=ADMIN).json()["status"] == "draining"
    )
    assert api.http.post(path, json={}, headers=ADMIN).json()["status"] == "draining"
