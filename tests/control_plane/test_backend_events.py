"""Backend events over REST: a scheduler backend reports a claim with its own times, or a loss."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.control_plane.conftest import ADMIN, Api
from tests.support.nodes import enrol_node


def _setup(api: Api, **hold: object) -> tuple[dict, dict, dict, dict]:
    node = api.node("slurm-cloud1", gpus=2)
    _, headers = api.tenant(name="alice", quota=2)
    r = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 600, **hold}, headers=headers)
    assert r.status_code == 201, r.text
    return node, r.json(), headers, enrol_node(api.http, "slurm-cloud1", ADMIN).headers


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def test_assignment_carries_tenant_and_start_for_the_backend(api: Api) -> None:
    node, hold, _, node_auth = _setup(api)
    beat = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=node_auth)
    [assignment] = beat.json()["assignments"]
    assert assignment["id"] == hold["id"] and assignment["tenant"] == "alice"
    assert assignment["start_at"] == hold["start_at"]


def test_a_claimed_holds_allocation_names_the_hold_for_the_backend(api: Api) -> None:
    node, hold, headers, node_auth = _setup(api)
    alloc = api.http.post(f"/v1/holds/{hold['id']}/claim", json={}, headers=headers).json()
    beat = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=node_auth)
    [assignment] = beat.json()["assignments"]
    assert (assignment["kind"], assignment["id"]) == ("allocation", alloc["id"])
    assert assignment["hold_id"] == hold["id"]


def test_claim_reported_with_backend_times_gives_time_to_gpu(api: Api) -> None:
    node, hold, headers, node_auth = _setup(api)
    api.clock.advance(30)
    submitted, started = api.clock.now - 10, api.clock.now - 9.5
    body = {
        "kind": "claimed",
        "job_id": "42",
        "submitted_at": _iso(submitted),
        "started_at": _iso(started),
    }
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/backend-event"
    r = api.http.post(path, json=body, headers=node_auth)
    assert r.status_code == 200, r.text
    alloc = r.json()["allocation"]
    assert r.json()["hold"]["status"] == "claimed"
    assert alloc["time_to_gpu_s"] == 0.5 and alloc["warm"] is True
    assert alloc["label"] == "job 42" and alloc["hold_id"] == hold["id"]
    # The tenant sees the claim as its own allocation.
    mine = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers)
    assert mine.status_code == 200 and mine.json()["status"] == "allocated"
    # Reported again (a bridge restarted before it saw the answer): the same allocation.
    again = api.http.post(path, json=body, headers=node_auth)
    assert again.status_code == 200 and again.json()["allocation"]["id"] == alloc["id"]
    other = api.http.post(path, json={**body, "job_id": "43"}, headers=node_auth)
    assert other.status_code == 409 and other.json()["error"]["code"] == "hold_claimed"


def test_ended_by_backend_cancels_hold_with_reason_and_frees_gpus(api: Api) -> None:
    node, hold, headers, node_auth = _setup(api)
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/backend-event"
    body = {"kind": "ended", "reason": "reservation jitgpu-x deleted"}
    r = api.http.post(path, json=body, headers=node_auth)
    assert r.status_code == 200, r.text
    assert r.json()["hold"]["status"] == "cancelled"
    assert "reservation jitgpu-x deleted" in r.json()["hold"]["reason"]
    beat = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=node_auth)
    assert beat.json()["assignments"] == []
    # Idempotent; and the hold, now ended, is not on the node any more for a claim.
    claim = {"kind": "claimed", "job_id": "7"}
    assert api.http.post(path, json=claim, headers=node_auth).status_code == 404
    assert api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()["status"] == "cancelled"


def test_failed_ends_hold_as_failed(api: Api) -> None:
    node, hold, _, node_auth = _setup(api)
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/backend-event"
    r = api.http.post(
        path, json={"kind": "failed", "reason": "node never booted"}, headers=node_auth
    )
    assert r.status_code == 200 and r.json()["hold"]["status"] == "failed"


def test_bad_input_and_wrong_node_and_tenant_key(api: Api) -> None:
    node, hold, headers, node_auth = _setup(api)
    other = api.node("elsewhere", gpus=1)
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/backend-event"
    bad = api.http.post(path, json={"kind": "exploded"}, headers=node_auth)
    assert bad.status_code == 422 and "kind" in bad.text
    order = {
        "kind": "claimed",
        "submitted_at": _iso(api.clock.now),
        "started_at": _iso(api.clock.now - 5),
    }
    wrong = api.http.post(path, json=order, headers=node_auth)
    assert wrong.status_code == 422 and "started_at" in wrong.text
    elsewhere = f"/v1/nodes/{other['id']}/holds/{hold['id']}/backend-event"
    # A node's credential acts as its own node only: another node's path is refused outright.
    refused = api.http.post(elsewhere, json={"kind": "ended"}, headers=node_auth)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "wrong_node"
    admin_elsewhere = api.http.post(elsewhere, json={"kind": "ended"}, headers=ADMIN)
    assert admin_elsewhere.status_code == 404  # the hold is not on that node
    # A tenant cannot claim its hold by pretending to be the backend.
    assert api.http.post(path, json={"kind": "ended"}, headers=headers).status_code == 403
