"""Renewing an allocation's lease: it ends lease_s after the renewal, only for its owner."""

from __future__ import annotations

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.registry import hold_lifecycle
from tests.control_plane.conftest import ADMIN, Api


def _alloc(api: Api, headers: dict, **body: object) -> dict:
    r = api.http.post("/v1/allocations", json={"gpu_count": 1, **body}, headers=headers)
    assert r.status_code in (201, 202), r.text
    return r.json()


def _status(api: Api, alloc_id: str, headers: dict) -> str:
    return api.http.get(f"/v1/allocations/{alloc_id}", headers=headers).json()["status"]


def test_renewal_moves_the_lease_end(api: Api, db: Database, settings: ServerSettings) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = _alloc(api, headers, lease_s=60)
    api.clock.advance(50)
    r = api.http.post(f"/v1/allocations/{alloc['id']}/renew", json={}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["lease_s"] == 60
    # The lease now ends 60 s after the renewal (t=110), not at t=60.
    hold_lifecycle(api.writer, settings, api.clock.advance(59))
    assert _status(api, alloc["id"], headers) == "allocated"
    r = api.http.post(
        f"/v1/allocations/{alloc['id']}/renew", json={"lease_s": 300}, headers=headers
    )
    assert r.status_code == 200 and r.json()["lease_s"] == 300
    hold_lifecycle(api.writer, settings, api.clock.advance(299))
    assert _status(api, alloc["id"], headers) == "allocated"
    hold_lifecycle(api.writer, settings, api.clock.advance(1))
    assert _status(api, alloc["id"], headers) == "expired"
    # An ended allocation is not brought back by a renewal.
    r = api.http.post(f"/v1/allocations/{alloc['id']}/renew", json={}, headers=headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "allocation_ended"
    assert api.http.get("/v1/gpus", headers=ADMIN).json()[0]["assigned_to"] is None


def test_renewal_sets_a_lease_where_there_was_none(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    alloc = _alloc(api, headers)
    path = f"/v1/allocations/{alloc['id']}/renew"
    r = api.http.post(path, json={}, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["field"] == "lease_s"
    r = api.http.post(path, json={"lease_s": 30}, headers=headers)
    assert r.status_code == 200 and r.json()["expires_at"] is not None
    hold_lifecycle(api.writer, settings, api.clock.advance(30))
    assert _status(api, alloc["id"], headers) == "expired"


def test_pending_allocation_keeps_the_new_length_for_its_grant(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=2)
    first = _alloc(api, headers)
    waiting = _alloc(api, headers, lease_s=10)
    assert waiting["status"] == "pending"
    r = api.http.post(
        f"/v1/allocations/{waiting['id']}/renew", json={"lease_s": 100}, headers=headers
    )
    assert r.status_code == 200 and r.json()["status"] == "pending"
    api.clock.advance(500)  # a pending allocation's lease has not started: nothing expires
    assert api.http.delete(f"/v1/allocations/{first['id']}", headers=headers).status_code == 200
    hold_lifecycle(api.writer, settings, api.clock.advance(99))
    assert _status(api, waiting["id"], headers) == "allocated"
    hold_lifecycle(api.writer, settings, api.clock.advance(1))
    assert _status(api, waiting["id"], headers) == "expired"


def test_other_tenant_gets_404_and_bad_bodies_name_the_field(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant("team-a", quota=1)
    _, other = api.tenant("team-b", quota=1)
    alloc = _alloc(api, headers, lease_s=60)
    path = f"/v1/allocations/{alloc['id']}/renew"
    r = api.http.post(path, json={"lease_s": 600}, headers=other)
    assert r.status_code == 404 and alloc["id"] in r.json()["error"]["message"]
    unknown = alloc["id"][:-1] + ("1" if alloc["id"][-1] != "1" else "2")
    r = api.http.post(f"/v1/allocations/{unknown}/renew", json={}, headers=headers)
    assert r.status_code == 404
    for body in ({"lease_s": 0}, {"lease_s": 10**12}, {"lease_s": "60"}, {"lease": 60}):
        r = api.http.post(path, json=body, headers=headers)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["field"] in ("lease_s", "lease"), r.text
    assert api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()["lease_s"] == 60
