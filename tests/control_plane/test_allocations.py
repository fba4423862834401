"""Allocations over REST on both databases: quota, isolation, idempotency, release, queueing."""

from __future__ import annotations

from sqlmodel import col, select

from control_plane.db.models import AssignmentRow
from tests.control_plane.conftest import ADMIN, Api


def test_allocate_places_on_registered_gpus(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    r = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "allocated"
    assert len(body["gpus"]) == 2 and {g["node"] for g in body["gpus"]} == {"n1"}
    # A cold assignment is not a time-to-GPU of 0: the job's own start is not seen.
    assert body["time_to_gpu_s"] is None and "cold start not measured" in body["time_to_gpu_note"]
    assert body["warm"] is False


def test_quota_two_then_third_waits_and_more_than_the_quota_is_refused(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=2)
    for _ in range(2):
        assert (
            api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).status_code
            == 201
        )
    # The quota limits what runs: the third waits in the queue although GPUs are free.
    r = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers)
    assert r.status_code == 202 and r.json()["status"] == "pending"
    # A request that could never run within quota + burst is refused at once.
    r = api.http.post("/v1/allocations", json={"gpu_count": 3}, headers=headers)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "quota_exceeded"
    assert r.json()["error"]["field"] == "gpu_count"


def test_queued_when_no_gpu_free_then_placed_on_release(api: Api) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=4)
    first = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers).json()
    queued = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=headers)
    assert queued.status_code == 202
    assert queued.json()["status"] == "pending" and queued.json()["gpus"] == []
    assert queued.json()["reason"] == "queued: 2 GPUs not free now (the cluster has 2 in all)"
    api.clock.advance(30)
    api.http.delete(f"/v1/allocations/{first['id']}", headers=headers)
    after = api.http.get(f"/v1/allocations/{queued.json()['id']}", headers=headers).json()
    assert after["status"] == "allocated"
    assert after["time_to_gpu_s"] is None
    assert "GPUs assigned 30.0s after the request" in after["time_to_gpu_note"]
    assert {g["uuid"] for g in after["gpus"]} == {g["uuid"] for g in first["gpus"]}


def test_a_class_gets_back_what_the_other_class_borrowed(api: Api) -> None:
    api.node("n1", gpus=8)
    tenant_id, headers = api.tenant(quota=4, online_share=0.5)  # online 2, batch 2

    def ask(gpus: int, job_class: str) -> dict:
        api.clock.advance(1)  # distinct submission times: first come, first served
        body = {"gpu_count": gpus, "job_class": job_class}
        r = api.http.post("/v1/allocations", json=body, headers=headers)
        return {"status_code": r.status_code, **r.json()}

    own = ask(2, "batch")
    borrowed = ask(2, "batch")  # online's idle share, lent to batch
    assert own["status_code"] == borrowed["status_code"] == 201
    # Online asks within its own guarantee: queued for its GPUs, not refused.
    online = ask(2, "online")
    assert online["status_code"] == 202 and online["status"] == "pending"
    # Meanwhile neither class gets more (both wait): the tenant stays within quota + burst.
    assert ask(1, "batch")["status"] == "pending"
    assert ask(1, "online")["status"] == "pending"
    api.clock.advance(10)
    api.http.delete(f"/v1/allocations/{own['id']}", headers=headers)
    after = api.http.get(f"/v1/allocations/{online['id']}", headers=headers).json()
    assert after["status"] == "allocated" and after["time_to_gpu_s"] is None
    assert "assigned 12.0s after the request" in after["time_to_gpu_note"]
    events = api.http.get(f"/v1/events?object_id={online['id']}", headers=ADMIN).json()
    assert any("lent to the other class" in (e["reason"] or "") for e in events)
    shown = api.http.get(f"/v1/tenants/{tenant_id}", headers=ADMIN).json()
    assert shown["online_share"] == 0.5
    # An explicit null removes the split; a share outside 0..1 is refused, naming the field.
    cleared = api.http.patch(f"/v1/tenants/{tenant_id}", json={"online_share": None}, headers=ADMIN)
    assert cleared.status_code == 200 and cleared.json()["online_share"] is None
    bad = api.http.patch(f"/v1/tenants/{tenant_id}", json={"online_share": 1.5}, headers=ADMIN)
    assert bad.status_code == 422 and "online_share" in bad.text


def test_a_claim_waiting_for_lent_gpus_keeps_its_hold(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=4, online_share=0.5)
    for _ in range(2):  # online takes its 2 and borrows batch's 2
        body = {"gpu_count": 2, "job_class": "online"}
        assert api.http.post("/v1/allocations", json=body, headers=headers).status_code == 201
    hold = api.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 600}, headers=headers)
    assert hold.status_code == 201, hold.text
    claim = api.http.post(f"/v1/holds/{hold.json()['id']}/claim", headers=headers)
    assert claim.status_code == 429 and "the hold is kept" in claim.json()["error"]["message"]
    again = api.http.get(f"/v1/holds/{hold.json()['id']}", headers=headers).json()
    assert again["status"] == hold.json()["status"] and len(again["gpus"]) == 2


def test_other_tenants_objects_are_404(api: Api) -> None:
    api.node("n1", gpus=4)
    _, a = api.tenant("a", quota=4)
    _, b = api.tenant("b", quota=4)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=a).json()
    hold = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600}, headers=a).json()
    for path in (f"/v1/allocations/{alloc['id']}", f"/v1/holds/{hold['id']}"):
        r = api.http.get(path, headers=b)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert api.http.delete(path, headers=b).status_code == 404
    assert api.http.post(f"/v1/holds/{hold['id']}/claim", headers=b).status_code == 404
    assert api.http.get("/v1/allocations", headers=b).json() == []
    # The owner still has both, untouched.
    assert api.http.get(f"/v1/allocations/{alloc['id']}", headers=a).json()["status"] == (
        "allocated"
    )


def test_idempotency_same_key_same_answer_one_effect(api: Api, db) -> None:  # type: ignore[no-untyped-def]
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    keyed = {**headers, "Idempotency-Key": "job-42"}
    first = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=keyed)
    again = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=keyed)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert len(api.http.get("/v1/allocations", headers=headers).json()) == 1
    with db.read() as session:
        active = session.exec(
            select(AssignmentRow).where(col(AssignmentRow.ended_at).is_(None))
        ).all()
    assert len(active) == 2
    other = api.http.post("/v1/allocations", json={"gpu_count": 3}, headers=keyed)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"


def test_release_twice_frees_nothing_twice(api: Api) -> None:
    api.node("n1", gpus=2)
    _, a = api.tenant("a", quota=2)
    _, b = api.tenant("b", quota=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=a).json()
    one = api.http.delete(f"/v1/allocations/{alloc['id']}", headers=a)
    assert one.status_code == 200 and one.json()["status"] == "released"
    # b takes the freed GPUs; a second release of a's allocation must not free b's.
    mine = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=b).json()
    assert mine["status"] == "allocated"
    two = api.http.delete(f"/v1/allocations/{alloc['id']}", headers=a)
    assert two.status_code == 200 and two.json() == one.json()
    gpus = api.http.get("/v1/gpus", headers=ADMIN).json()
    assert {g["assigned_to"] for g in gpus} == {mine["id"]}


def test_events_feed_records_each_transition(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = api.http.post(
        "/v1/allocations", json={"gpu_count": 1, "lease_s": 60}, headers=headers
    ).json()
    assert alloc["expires_at"] is not None
    events = api.http.get("/v1/events", params={"object_id": alloc["id"]}, headers=headers)
    assert [e["to_state"] for e in events.json()] == ["allocated"]


def test_bad_input_names_the_field(api: Api) -> None:
    _, headers = api.tenant()
    for body, field in (
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": "x"}, "gpu_count"),
        ({"gpu_count": 1, "lease_s": 10**12}, "lease_s"),
        ({"gpu_count": 1, "surprise": 1}, "surprise"),
        ({}, "gpu_count"),
    ):
        r = api.http.post("/v1/allocations", json=body, headers=headers)
        assert r.status_code == 422, body
        assert r.json()["error"]["field"] == field
    r = api.http.post(
        "/v1/allocations",
        content=b"{not json",
        headers={**headers, "content-type": "application/json"},
    )
    assert r.status_code == 422
