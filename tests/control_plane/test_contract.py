"""The REST contract on both databases: 202 for a queued claim, idempotent creates, no replay
of secrets, duplicate names, and a tenant's quota held under a concurrent burst."""

from __future__ import annotations

import threading

from sqlmodel import col, select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, AssignmentRow
from tests.control_plane.conftest import ADMIN, Api


def _fill(api: Api) -> dict:
    """One GPU, taken by another tenant: whatever comes next has to queue."""
    api.node("n1", gpus=1)
    _, other = api.tenant("other", quota=1)
    taken = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=other)
    assert taken.status_code == 201, taken.text
    return {"id": taken.json()["id"], "headers": other}


def test_claim_of_a_hold_not_placed_yet_is_202_pending(api: Api) -> None:
    taken = _fill(api)
    _, headers = api.tenant(quota=2)
    hold = api.http.post(
        "/v1/holds", json={"gpu_count": 1, "ttl_s": 600, "start_in_s": 3600}, headers=headers
    ).json()
    assert hold["status"] == "requested"
    r = api.http.post(f"/v1/holds/{hold['id']}/claim", headers=headers)
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "pending" and r.json()["gpus"] == []
    api.clock.advance(5)
    api.http.delete(f"/v1/allocations/{taken['id']}", headers=taken["headers"])
    placed = api.http.get(f"/v1/allocations/{r.json()['id']}", headers=headers).json()
    assert placed["status"] == "allocated"


def test_allocation_naming_a_hold_not_placed_yet_is_202_pending(api: Api) -> None:
    _fill(api)
    _, headers = api.tenant(quota=2)
    hold = api.http.post(
        "/v1/holds", json={"gpu_count": 1, "ttl_s": 600, "start_in_s": 3600}, headers=headers
    ).json()
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "hold_id": hold["id"]}, headers=headers
    )
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "pending" and r.json()["hold_id"] == hold["id"]


def test_claim_of_a_placed_hold_stays_201(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600}, headers=headers)
    r = api.http.post(f"/v1/holds/{hold.json()['id']}/claim", headers=headers)
    assert r.status_code == 201 and r.json()["status"] == "allocated"


def test_duplicate_tenant_name_is_409(api: Api) -> None:
    api.tenant("team-a")
    r = api.http.post("/v1/tenants", json={"name": "team-a", "quota_gpus": 1}, headers=ADMIN)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "tenant_exists"
    assert [t["name"] for t in api.http.get("/v1/tenants", headers=ADMIN).json()] == ["team-a"]


def test_idempotent_hold_create_has_one_effect(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    keyed = {**headers, "Idempotency-Key": "hold-1"}
    body = {"gpu_count": 1, "ttl_s": 600, "label": "nightly"}
    first = api.http.post("/v1/holds", json=body, headers=keyed)
    api.clock.advance(3)
    again = api.http.post("/v1/holds", json=body, headers=keyed)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    assert len(api.http.get("/v1/holds", headers=headers).json()) == 1
    other = api.http.post("/v1/holds", json={**body, "gpu_count": 2}, headers=keyed)
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["field"] == "Idempotency-Key"
    assert len(api.http.get("/v1/holds", headers=headers).json()) == 1


def test_idempotent_claim_has_one_effect(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 600}, headers=headers)
    path = f"/v1/holds/{hold.json()['id']}/claim"
    keyed = {**headers, "Idempotency-Key": "claim-1"}
    first = api.http.post(path, json={"lease_s": 60}, headers=keyed)
    again = api.http.post(path, json={"lease_s": 60}, headers=keyed)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    assert len(api.http.get("/v1/allocations", headers=headers).json()) == 1
    other = api.http.post(path, json={"lease_s": 120}, headers=keyed)
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Without the key a second claim is the ordinary conflict: the hold is taken.
    plain = api.http.post(path, json={"lease_s": 60}, headers=headers)
    assert plain.status_code == 409 and plain.json()["error"]["code"] == "hold_claimed"
    assert len(api.http.get("/v1/allocations", headers=headers).json()) == 1


def test_idempotency_key_is_refused_where_the_answer_is_a_secret(api: Api) -> None:
    tenant_id, _ = api.tenant()
    keyed = {**ADMIN, "Idempotency-Key": "k-1"}
    node = api.node("n1", gpus=1)
    for path, listing, body in (
        (f"/v1/tenants/{tenant_id}/api-keys", f"/v1/tenants/{tenant_id}/api-keys", {"label": "ci"}),
        ("/v1/node-tokens", "/v1/node-tokens", {"node_name": "n2"}),
        ("/v1/nodes/enrol", "/v1/node-tokens", {"name": "n3"}),
        (f"/v1/nodes/{node['id']}/credentials", "/v1/node-tokens", None),
    ):
        before = api.http.get(listing, headers=ADMIN).json()
        for _ in range(2):
            r = api.http.post(path, json=body, headers=keyed)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "idempotency_not_supported"
            assert error["field"] == "Idempotency-Key" and "Idempotency-Key" in error["message"]
        assert api.http.get(listing, headers=ADMIN).json() == before
        assert api.http.post(path, json=body, headers=ADMIN).status_code == 201


def test_concurrent_burst_never_takes_a_tenant_over_its_quota(api: Api, db: Database) -> None:
    quota, threads = 3, 8
    api.node("n1", gpus=8)
    tenant_id, headers = api.tenant(quota=quota)
    start = threading.Barrier(threads)
    answers: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        start.wait(timeout=30)
        r = api.http.post(
            "/v1/allocations", json={"gpu_count": 1 + n % 2, "use_holds": False}, headers=headers
        )
        with lock:
            answers.append((r.status_code, r.json()))

    workers = [threading.Thread(target=ask, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert len(answers) == threads
    assert {status for status, _ in answers} <= {201, 202, 429}, answers
    granted = sum(body["gpu_count"] for status, body in answers if status in (201, 202))
    assert 0 < granted <= quota, answers
    assert any(status == 429 for status, _ in answers)
    with db.read() as session:
        allocs = session.exec(
            select(AllocationRow).where(AllocationRow.tenant_id == tenant_id)
        ).all()
        active = session.exec(
            select(AssignmentRow).where(
                col(AssignmentRow.allocation_id).in_([a.id for a in allocs]),
                col(AssignmentRow.ended_at).is_(None),
            )
        ).all()
    assert sum(a.gpu_count for a in allocs) == granted <= quota
    assert len(active) <= quota
