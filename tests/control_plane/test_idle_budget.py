"""A tenant's idle budget in /v1/policies: stored, returned, validated, kept by other edits."""

from __future__ import annotations

from tests.control_plane.conftest import ADMIN, Api


def test_idle_budget_is_set_read_back_and_cleared(api: Api) -> None:
    tenant_id, headers = api.tenant()
    assert api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()["idle_budget"] is None
    info = api.policy(tenant_id, idle_budget=0.05)
    assert info["idle_budget"] == 0.05
    # The tenant reads its own budget; changing another limit keeps it.
    assert api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()["idle_budget"] == 0.05
    assert api.policy(tenant_id, max_held_gpus=4)["idle_budget"] == 0.05
    assert api.policy(tenant_id, idle_budget=None)["idle_budget"] is None


def test_a_bad_idle_budget_is_a_4xx_naming_the_field(api: Api) -> None:
    tenant_id, _ = api.tenant()
    current = api.http.get(f"/v1/policies/{tenant_id}", headers=ADMIN).json()
    body = {k: current[k] for k in ("max_held_gpus", "max_idle_gpu_hours_per_day")}
    for value in (-0.1, 11, "lots"):
        r = api.http.put(
            f"/v1/policies/{tenant_id}", json={**body, "idle_budget": value}, headers=ADMIN
        )
        assert r.status_code == 422, r.text
        assert "idle_budget" in r.json()["error"]["message"]


def _over_budget(api: Api) -> tuple[str, dict]:
    """A tenant with idle_budget 0.05 that held 8 GPUs unclaimed for half an hour."""
    api.node("n1", gpus=16)
    tenant_id, headers = api.tenant(quota=16)
    hold = api.http.post("/v1/holds", json={"gpu_count": 8, "ttl_s": 3600}, headers=headers)
    assert hold.status_code == 201, hold.text
    api.policy(tenant_id, idle_budget=0.05)
    fresh = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert fresh["idle_ratio"] is None and fresh["over_idle_budget"] is False
    api.clock.advance(1800)  # 8 GPUs x 0.5 h = 4 idle GPU-hours, allowance 0.05 x 8 = 0.4
    assert api.http.delete(f"/v1/holds/{hold.json()['id']}", headers=headers).status_code == 200
    return tenant_id, headers


def test_over_its_idle_budget_a_tenant_gets_no_new_holds_but_keeps_allocating(api: Api) -> None:
    tenant_id, headers = _over_budget(api)
    info = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert info["idle_window_gpu_hours"] == 4.0 and info["busy_window_gpu_hours"] == 0.0
    assert info["idle_ratio"] is None and info["over_idle_budget"] is True
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "idle_budget_exceeded" and "idle_budget 0.05" in error["message"]
    alloc = api.http.post(
        "/v1/allocations", json={"gpu_count": 8, "use_holds": False}, headers=headers
    )
    assert alloc.status_code in (200, 201, 202), alloc.text
    assert alloc.json()["status"] == "allocated"
    # Two hours of 8 busy GPUs: 16 GPU-hours, so the 4 idle ones are a ratio of 0.25.
    api.clock.advance(7200)
    info = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert info["busy_window_gpu_hours"] == 16.0 and info["idle_ratio"] == 0.25
    assert info["over_idle_budget"] is True
    # A day later the idle half hour has left the window; the allocation kept running.
    api.clock.advance(86400)
    info = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert info["idle_ratio"] == 0.0 and info["over_idle_budget"] is False
    assert info["busy_window_gpu_hours"] == 8 * 24.0
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    assert r.status_code == 201, r.text


def test_a_hold_made_before_going_over_can_still_be_claimed(api: Api) -> None:
    api.node("n1", gpus=16)
    tenant_id, headers = api.tenant(quota=16)
    api.policy(tenant_id, idle_budget=0.0)
    # Budget 0 with nothing idle yet: the allowance is 0, so even the first hold is refused.
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600}, headers=headers)
    assert r.status_code == 429 and r.json()["error"]["code"] == "idle_budget_exceeded"
    api.policy(tenant_id, idle_budget=None)
    kept = api.http.post("/v1/holds", json={"gpu_count": 4, "ttl_s": 3600}, headers=headers)
    assert kept.status_code == 201, kept.text
    api.policy(tenant_id, idle_budget=0.05)
    api.clock.advance(1800)  # 2 idle GPU-hours against an allowance of 0.4
    assert api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()["over_idle_budget"]
    claim = api.http.post(f"/v1/holds/{kept.json()['id']}/claim", headers=headers)
    assert claim.status_code == 201, claim.text


def test_without_an_idle_budget_nothing_is_refused_for_it(api: Api) -> None:
    api.node("n1", gpus=16)
    tenant_id, headers = api.tenant(quota=16)
    hold = api.http.post("/v1/holds", json={"gpu_count": 8, "ttl_s": 3600}, headers=headers)
    api.clock.advance(1800)
    api.http.delete(f"/v1/holds/{hold.json()['id']}", headers=headers)
    info = api.http.get(f"/v1/policies/{tenant_id}", headers=headers).json()
    assert info["idle_window_gpu_hours"] == 4.0 and info["over_idle_budget"] is False
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    assert r.status_code == 201, r.text


def test_a_hold_is_shortened_to_what_is_left_of_the_budget(api: Api) -> None:
    api.node("n1", gpus=16)
    tenant_id, headers = api.tenant(quota=16)
    api.policy(tenant_id, idle_budget=0.05)  # no work yet: 0.05 x 8 GPU-hours = 1440 GPU-s
    r = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600}, headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["ttl_s"] == 720 and "idle_budget" in r.json()["reason"]
    # 6 GPUs placed 300 s before their start would spend the 1440 before the start.
    r = api.http.post(
        "/v1/holds",
        json={"gpu_count": 6, "ttl_s": 600, "start_in_s": 600, "lead_s": 300},
        headers=headers,
    )
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "idle_budget_exceeded" and error["field"] == "gpu_count"
    assert "idle_budget 0.05" in error["message"]
    small = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 300}, headers=headers)
    assert small.status_code == 201 and small.json()["ttl_s"] == 300
