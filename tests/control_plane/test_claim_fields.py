"""Claims keep the job_class, strategy and warm-up the job gave, so class shares count right."""

from __future__ import annotations

from tests.control_plane.conftest import Api


def _hold(api: Api, headers: dict, **extra: object) -> dict:
    r = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 3600, **extra}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def test_an_online_claim_counts_against_the_online_share(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=4, online_share=0.5)  # online 2, batch 2
    hold = _hold(api, headers)
    assert hold["status"] == "ready"
    # The automatic match claims the hold; the job said it is online.
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 2, "job_class": "online"}, headers=headers
    )
    assert r.status_code == 201, r.text
    claimed = r.json()
    assert claimed["hold_id"] == hold["id"] and claimed["job_class"] == "online"
    batch = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers)
    assert batch.status_code == 201, batch.text
    # Online holds its whole share, batch its own: nothing is lent, so a third online GPU
    # waits for the tenant's quota. Counted as batch, the claim would have made batch a
    # borrower of online's share, and this request would wait for GPUs lent to batch.
    more = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "job_class": "online"}, headers=headers
    )
    assert more.status_code == 202 and more.json()["status"] == "pending", more.text
    assert "exceed quota 4" in more.json()["reason"]
    assert "lent" not in more.json()["reason"]


def test_a_claim_by_hold_id_keeps_class_strategy_and_warmup(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    # Far ahead: the hold is not placed yet, so the claim becomes a reactive request that is
    # placed with the claim's strategy and warmed with the claim's profile.
    hold = _hold(api, headers, start_in_s=7200)
    assert hold["status"] == "requested"
    body = {"job_class": "online", "strategy": "distributed", "warmup": "torch"}
    r = api.http.post(f"/v1/holds/{hold['id']}/claim", json=body, headers=headers)
    assert r.status_code in (201, 202), r.text
    alloc = r.json()
    assert (alloc["job_class"], alloc["strategy"], alloc["warmup"]) == (
        "online",
        "distributed",
        "torch",
    )
    # Warm-up still to run: the GPUs are not usable yet.
    assert alloc["status"] == "allocated" and alloc["ready_at"] is None


def test_allocation_create_with_hold_id_passes_its_fields_to_the_claim(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    hold = _hold(api, headers, strategy="balanced")
    r = api.http.post(
        "/v1/allocations",
        json={"gpu_count": 2, "hold_id": hold["id"], "job_class": "online"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    alloc = r.json()
    # No strategy given: the hold's, under which its GPUs were placed, is kept.
    assert (alloc["job_class"], alloc["strategy"]) == ("online", "balanced")
    assert alloc["warm"] is True


def test_automatic_match_skips_a_hold_warmed_with_another_profile(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    hold = _hold(api, headers)  # no warm-up
    r = api.http.post("/v1/allocations", json={"gpu_count": 2, "warmup": "torch"}, headers=headers)
    assert r.status_code == 201, r.text
    alloc = r.json()
    assert alloc["hold_id"] is None and alloc["warmup"] == "torch"
    assert api.http.get(f"/v1/holds/{hold['id']}", headers=headers).json()["status"] == "ready"
