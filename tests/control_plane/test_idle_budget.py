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
