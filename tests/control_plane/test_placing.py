"""Placement rules across tenants, on both databases: whose holds a hold may displace."""

from __future__ import annotations

from tests.control_plane.conftest import Api


def _hold(api: Api, headers: dict, confidence: float) -> dict:
    body = {"gpu_count": 2, "ttl_s": 3600, "confidence": confidence}
    r = api.http.post("/v1/holds", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def test_a_hold_never_displaces_another_tenants_hold(api: Api) -> None:
    api.node("n1", gpus=2)
    _, other = api.tenant("team-b", quota=2)
    victim = _hold(api, other, 0.1)
    tenant_id, headers = api.tenant("team-a", quota=2)
    api.policy(tenant_id, holds_may_preempt_holds=True)
    # However confident it says it is, team-a may not take team-b's speculative GPUs.
    mine = _hold(api, headers, 1.0)
    assert mine["status"] == "requested" and mine["gpus"] == []
    kept = api.http.get(f"/v1/holds/{victim['id']}", headers=other).json()
    assert kept["status"] == "ready" and len(kept["gpus"]) == 2


def test_a_hold_displaces_its_own_tenants_less_confident_hold(api: Api) -> None:
    api.node("n1", gpus=2)
    tenant_id, headers = api.tenant("team-a", quota=4)
    api.policy(tenant_id, holds_may_preempt_holds=True, max_held_gpus=4)
    weak = _hold(api, headers, 0.2)
    strong = _hold(api, headers, 0.9)
    assert strong["status"] == "ready"
    assert sorted(g["uuid"] for g in strong["gpus"]) == ["GPU-n1-0", "GPU-n1-1"]
    displaced = api.http.get(f"/v1/holds/{weak['id']}", headers=headers).json()
    assert displaced["status"] == "preempted" and strong["id"] in displaced["reason"]
