"""Holds over REST on both databases: place, warm, claim, budget, preemption by real demand."""

from __future__ import annotations

from tests.control_plane.conftest import ADMIN, Api


def _hold(api: Api, headers: dict, **body: object) -> dict:
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600, **body}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def test_hold_without_warmup_is_ready_and_claim_is_instant(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers, gpu_count=2)
    assert hold["status"] == "ready" and len(hold["gpus"]) == 2
    api.clock.advance(45)
    r = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers)
    assert r.status_code == 201, r.text
    alloc = r.json()
    assert alloc["status"] == "allocated" and alloc["warm"] is True
    assert alloc["time_to_gpu_s"] == 0.0
    assert {g["uuid"] for g in alloc["gpus"]} == {g["uuid"] for g in hold["gpus"]}
    after = api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()
    assert after["status"] == "claimed" and after["allocation_id"] == alloc["id"]
    again = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "hold_claimed"


def test_warmup_reported_by_node_makes_hold_ready(api: Api) -> None:
    node = api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    hold = _hold(api, headers, warmup="default")
    assert hold["status"] == "placed"
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/warmup"
    assert (
        api.http.post(
            path, json={"ok": True, "warmup_s": 0, "started": True}, headers=ADMIN
        ).json()["status"]
        == "warming"
    )
    api.clock.advance(12)
    ready = api.http.post(path, json={"ok": True, "warmup_s": 12.0}, headers=ADMIN).json()
    assert ready["status"] == "ready" and ready["warmup_s"] == 12.0


def test_claim_while_warming_is_usable_when_warm_up_ends(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = _hold(api, headers, warmup="default")
    path = f"/v1/nodes/{node['id']}/holds/{hold['id']}/warmup"
    api.http.post(path, json={"ok": True, "warmup_s": 0, "started": True}, headers=ADMIN)
    alloc = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers).json()
    assert alloc["warm"] is False and alloc["time_to_gpu_s"] is None
    api.clock.advance(20)
    api.http.post(path, json={"ok": True, "warmup_s": 25.0}, headers=ADMIN)
    done = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert done["time_to_gpu_s"] == 20.0


def test_failed_warmup_frees_gpus_with_reason(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = _hold(api, headers, warmup="default")
    r = api.http.post(
        f"/v1/nodes/{node['id']}/holds/{hold['id']}/warmup",
        json={"ok": False, "warmup_s": 3, "exit_code": 7, "output_tail": "boom"},
        headers=ADMIN,
    )
    assert r.json()["status"] == "failed" and "exit 7" in r.json()["reason"]
    assert api.http.get("/v1/gpus", headers=ADMIN).json()[0]["assigned_to"] is None


def test_future_hold_waits_in_requested(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = _hold(api, headers, start_in_s=3600, lead_s=120)
    assert hold["status"] == "requested" and hold["gpus"] == []


def test_real_allocation_preempts_least_confident_hold(api: Api) -> None:
    api.node("n1", gpus=2)
    _, a = api.tenant("a", quota=2)
    _, b = api.tenant("b", quota=2)
    sure = _hold(api, a, confidence=0.9)
    api.clock.advance(1)
    unsure = _hold(api, a, confidence=0.3)
    r = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=b)
    assert r.status_code == 201
    assert r.json()["preempted_holds"] == [unsure["id"]]
    assert api.http.get(f"/v1/holds/{unsure['id']}", headers=a).json()["status"] == "preempted"
    assert api.http.get(f"/v1/holds/{sure['id']}", headers=a).json()["status"] == "ready"


def test_speculative_budget_refuses_with_the_limit_named(api: Api) -> None:
    api.node("n1", gpus=8)
    tenant_id, headers = api.tenant(quota=8)
    api.policy(tenant_id, max_held_gpus=2)
    _hold(api, headers, gpu_count=2)
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "speculative_budget_exceeded"
    assert "max_held_gpus 2" in r.json()["error"]["message"]


def test_policy_ttl_and_warmup_limits_are_403(api: Api) -> None:
    api.node("n1", gpus=8)
    tenant_id, headers = api.tenant(quota=8)
    api.policy(tenant_id, max_hold_ttl_s=300, allowed_warmups=["light"])
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 301}, headers=headers)
    assert r.status_code == 403 and r.json()["error"]["field"] == "ttl_s"
    r = api.http.post(
        "/v1/holds", json={"gpu_count": 1, "ttl_s": 60, "warmup": "heavy"}, headers=headers
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "policy_allowed_warmups"


def test_idle_budget_counts_unclaimed_time(api: Api) -> None:
    api.node("n1", gpus=8)
    tenant_id, headers = api.tenant(quota=8)
    api.policy(tenant_id, max_idle_gpu_hours_per_day=1.0)
    hold = _hold(api, headers, gpu_count=2, ttl_s=3600)
    api.clock.advance(1800)  # 2 GPUs x 0.5 h = 1 GPU-hour idle
    api.http.delete(f"/v1/holds/{hold['id']}", headers=headers)
    info = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert abs(info["idle_gpu_hours_today"] - 1.0) < 1e-6
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    assert r.status_code == 429 and r.json()["error"]["code"] == "idle_budget_exhausted"


def test_cancel_is_idempotent(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = _hold(api, headers)
    one = api.http.delete(f"/v1/holds/{hold['id']}", headers=headers)
    two = api.http.delete(f"/v1/holds/{hold['id']}", headers=headers)
    assert one.status_code == two.status_code == 200
    assert one.json()["status"] == two.json()["status"] == "cancelled"


def test_allocation_claims_matching_ready_hold_automatically(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = _hold(api, headers, gpu_count=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).json()
    assert alloc["hold_id"] == hold["id"] and alloc["warm"] is True
    cold = api.http.post(
        "/v1/allocations", json={"gpu_count": 2, "use_holds": False}, headers=headers
    ).json()
    assert cold["hold_id"] is None and cold["warm"] is False


def test_hold_in_the_past_is_refused(api: Api) -> None:
    _, headers = api.tenant()
    r = api.http.post(
        "/v1/holds",
        json={"gpu_count": 1, "ttl_s": 10, "start_at": "2001-01-01T00:00:00Z"},
        headers=headers,
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "start_at"
