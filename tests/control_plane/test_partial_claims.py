"""Claims of fewer GPUs than the hold has, on both databases: the job keeps what it needs,
together, and the rest are free for anyone at once."""

from __future__ import annotations

from tests.control_plane.conftest import ADMIN, Api


def _hold(api: Api, headers: dict, **body: object) -> dict:
    r = api.http.post("/v1/holds", json={"gpu_count": 4, "ttl_s": 600, **body}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def _owners(api: Api) -> dict[str, str | None]:
    return {g["uuid"]: g["assigned_to"] for g in api.http.get("/v1/gpus", headers=ADMIN).json()}


def test_partial_claim_of_a_ready_hold_keeps_two_and_frees_the_rest(api: Api) -> None:
    api.node("n1", gpus=4)
    tenant_id, headers = api.tenant(quota=4)
    hold = _hold(api, headers)
    assert hold["status"] == "ready" and len(hold["gpus"]) == 4
    api.clock.advance(30)
    r = api.http.post(f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 2}, headers=headers)
    assert r.status_code == 201, r.text
    alloc = r.json()
    assert alloc["status"] == "allocated" and alloc["gpu_count"] == 2
    assert alloc["warm"] is True and alloc["time_to_gpu_s"] == 0.0
    assert alloc["hold_id"] == hold["id"]
    # The lowest indexes of the node: deterministic, and the same GPUs the hold warmed.
    assert [(g["node"], g["index"]) for g in alloc["gpus"]] == [("n1", 0), ("n1", 1)]
    kept = {g["uuid"] for g in alloc["gpus"]}
    assert kept < {g["uuid"] for g in hold["gpus"]}

    after = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert after["status"] == "claimed" and after["allocation_id"] == alloc["id"]
    assert after["reason"] == "claimed 2 of 4 GPUs; 2 released"
    owners = _owners(api)
    assert {u for u, o in owners.items() if o == alloc["id"]} == kept
    assert [o for u, o in owners.items() if u not in kept] == [None, None]

    events = api.http.get(f"/v1/events?object_id={hold['id']}", headers=headers).json()
    assert events[-1]["to_state"] == "claimed"
    assert events[-1]["reason"] == "claimed 2 of 4 GPUs; 2 released"

    # The hold sat on all four GPUs until the claim, and on none after it.
    api.clock.advance(600)
    budget = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert abs(budget["idle_gpu_hours_today"] - 4 * 30 / 3600) < 1e-6

    # Another tenant gets the two given back at once, without displacing anything.
    _, other = api.tenant("team-b", quota=2)
    r = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=other)
    assert r.status_code == 201, r.text
    assert r.json()["preempted_holds"] == []
    assert {g["uuid"] for g in r.json()["gpus"]}.isdisjoint(kept)


def test_partial_claim_keeps_the_gpus_on_the_node_holding_most_of_the_hold(api: Api) -> None:
    api.node("n1", gpus=1)
    api.node("n2", gpus=3)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers)
    assert sorted(g["node"] for g in hold["gpus"]) == ["n1", "n2", "n2", "n2"]
    alloc = api.http.post(
        f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 2}, headers=headers
    ).json()
    assert [(g["node"], g["index"]) for g in alloc["gpus"]] == [("n2", 0), ("n2", 1)]
    owners = _owners(api)
    assert owners["GPU-n1-0"] is None and owners["GPU-n2-2"] is None


def test_quota_counts_what_the_claim_keeps(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=2)
    hold = _hold(api, headers)
    whole = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers)
    assert whole.status_code == 429, whole.text
    part = api.http.post(f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 2}, headers=headers)
    assert part.status_code == 201, part.text
    assert part.json()["gpu_count"] == 2


def test_claim_of_more_gpus_than_the_hold_has_is_422(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers, gpu_count=2)
    r = api.http.post(f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 3}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "gpu_count"
    assert "2 GPU(s)" in r.json()["error"]["message"]
    zero = api.http.post(f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 0}, headers=headers)
    assert zero.status_code == 422 and zero.json()["error"]["field"] == "gpu_count"
    # Nothing changed: the hold is still there, warm, for a claim that fits.
    assert api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()["status"] == "ready"
    assert sum(o is not None for o in _owners(api).values()) == 2


def test_partial_claim_retried_with_its_key_has_one_effect(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers)
    keyed = {**headers, "Idempotency-Key": "claim-1"}
    path = f"/v1/holds/{hold['id']}/claim"
    first = api.http.post(path, json={"gpu_count": 2}, headers=keyed)
    api.clock.advance(5)
    again = api.http.post(path, json={"gpu_count": 2}, headers=keyed)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert len(api.http.get("/v1/allocations", headers=headers).json()) == 1
    assert sum(o is not None for o in _owners(api).values()) == 2
    other = api.http.post(path, json={"gpu_count": 1}, headers=keyed)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"


def test_allocation_naming_a_hold_claims_the_gpu_count_asked_for(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers)
    too_many = api.http.post(
        "/v1/allocations", json={"gpu_count": 5, "hold_id": hold["id"]}, headers=headers
    )
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "gpu_count"
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 3, "hold_id": hold["id"]}, headers=headers
    )
    assert r.status_code == 201, r.text
    alloc = r.json()
    assert alloc["gpu_count"] == 3 and len(alloc["gpus"]) == 3
    assert alloc["hold_id"] == hold["id"] and alloc["warm"] is True
    after = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert after["reason"] == "claimed 3 of 4 GPUs; 1 released"
    assert sum(o is None for o in _owners(api).values()) == 1


def test_automatic_matching_takes_only_a_hold_of_the_same_size(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    hold = _hold(api, headers)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).json()
    assert alloc["hold_id"] is None
    assert api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()["status"] == "ready"


def test_partial_claim_while_warming_leaves_the_node_only_the_kept_gpus(api: Api) -> None:
    node = api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers, warmup="default")
    warmup = f"/v1/nodes/{node['id']}/holds/{hold['id']}/warmup"
    api.http.post(warmup, json={"ok": True, "warmup_s": 0, "started": True}, headers=ADMIN)
    alloc = api.http.post(
        f"/v1/holds/{hold['id']}/claim", json={"gpu_count": 1}, headers=headers
    ).json()
    assert alloc["warm"] is False and alloc["time_to_gpu_s"] is None
    beat = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=ADMIN).json()
    # The node keeps one GPU, for the allocation; the hold is gone, and so is its warm-up
    # on the three GPUs given back.
    assert [(a["kind"], a["id"], a["gpu_uuids"]) for a in beat["assignments"]] == [
        ("allocation", alloc["id"], [alloc["gpus"][0]["uuid"]])
    ]
    # The node warms the kept GPU again and reports it on the hold: the job's GPU is ready.
    api.clock.advance(15)
    r = api.http.post(warmup, json={"ok": True, "warmup_s": 15.0}, headers=ADMIN)
    assert r.status_code == 200, r.text
    done = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert done["time_to_gpu_s"] == 15.0


def test_a_claim_before_warm_up_began_has_the_node_warm_for_the_job(api: Api) -> None:
    node = api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    # Placed, and the node has not started its warm-up yet (no heartbeat since).
    hold = _hold(api, headers, gpu_count=2, warmup="default")
    assert hold["status"] == "placed"
    alloc = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers).json()
    assert alloc["warm"] is False and alloc["time_to_gpu_s"] is None
    beat = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=ADMIN).json()
    [job] = beat["assignments"]
    assert (job["kind"], job["id"], job["warmup"]) == ("allocation", alloc["id"], "default")
    api.clock.advance(20)
    report = f"/v1/nodes/{node['id']}/allocations/{alloc['id']}/warmup"
    r = api.http.post(report, json={"ok": True, "warmup_s": 20.0}, headers=ADMIN)
    assert r.status_code == 200, r.text
    done = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert done["time_to_gpu_s"] == 20.0
