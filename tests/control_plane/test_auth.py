"""The auth ladder, on both databases: 401 for every bad credential, 403 for the wrong scope."""

from __future__ import annotations

from tests.control_plane.conftest import ADMIN, Api
from tests.support.nodes import enrol_node


def test_no_header_is_401(api: Api) -> None:
    r = api.http.get("/v1/allocations")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["www-authenticate"] == "Bearer"


def test_malformed_header_is_401(api: Api) -> None:
    for header in ("Basic abc", "Bearer", "Bearer a b", "token"):
        r = api.http.get("/v1/allocations", headers={"Authorization": header})
        assert r.status_code == 401, header
        assert "malformed" in r.json()["error"]["message"]


def test_unknown_key_is_401(api: Api) -> None:
    r = api.http.get("/v1/allocations", headers={"Authorization": "Bearer jgt_nope"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"


def test_revoked_key_is_401(api: Api) -> None:
    tenant_id, headers = api.tenant()
    assert api.http.get("/v1/allocations", headers=headers).status_code == 200
    keys = api.http.get(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN).json()
    assert len(keys) == 1
    r = api.http.delete(f"/v1/tenants/{tenant_id}/api-keys/{keys[0]['id']}", headers=ADMIN)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert api.http.get("/v1/allocations", headers=headers).status_code == 401


def test_tenant_key_on_admin_route_is_403(api: Api) -> None:
    _, headers = api.tenant()
    r = api.http.post("/v1/tenants", json={"name": "x", "quota_gpus": 1}, headers=headers)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert api.http.get("/v1/nodes", headers=headers).status_code == 403


def test_node_credential_cannot_act_as_tenant_or_admin(api: Api) -> None:
    node = enrol_node(api.http, "n1", ADMIN)
    node_headers = node.headers
    assert (
        api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=node_headers).status_code
        == 403
    )
    assert api.http.get("/v1/tenants", headers=node_headers).status_code == 403
    # ...but may register its own node.
    body = {"name": "n1", "gpus": [{"uuid": "GPU-x", "model": "A100", "memory_mb": 1}]}
    r = api.http.post("/v1/nodes", json=body, headers=node_headers)
    assert r.status_code == 201 and r.json()["id"] == node.node_id


def test_keys_are_hashed_at_rest_and_listing_shows_no_secret(api: Api, db) -> None:  # type: ignore[no-untyped-def]
    from sqlmodel import select

    from control_plane.db.models import ApiKeyRow

    tenant_id, headers = api.tenant()
    secret = headers["Authorization"].split()[1]
    listing = api.http.get(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN)
    assert secret not in listing.text
    assert "key" not in listing.json()[0]
    with db.read() as session:
        stored = [r.key_hash for r in session.exec(select(ApiKeyRow)).all()]
    assert secret not in stored and all(len(h) == 64 for h in stored)
