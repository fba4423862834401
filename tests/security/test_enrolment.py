"""Enrolment tokens, node credentials, rotation, revocation and GPU ownership, on both databases."""

from __future__ import annotations

from sqlmodel import select

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.models import ApiKeyRow, EnrolTokenRow
from control_plane.jobs.registry import liveness
from tests.control_plane.conftest import ADMIN, Api
from tests.support.nodes import enrol_node, enrol_token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def gpus(prefix: str, count: int) -> list[dict]:
    return [
        {"uuid": f"GPU-{prefix}-{i}", "model": "A100", "memory_mb": 81920, "index": i}
        for i in range(count)
    ]


def enrol(api: Api, name: str, token: str) -> object:
    return api.http.post("/v1/nodes/enrol", json={"name": name}, headers=bearer(token))


def test_an_enrolment_token_enrols_its_node_once_and_only_its_node(api: Api) -> None:
    token = enrol_token(api.http, "node-1", ADMIN)
    assert token.startswith("jge_")
    wrong = enrol(api, "node-2", token)
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "wrong_node"
    first = enrol(api, "node-1", token)
    assert first.status_code == 201, first.text
    credential = first.json()
    assert credential["credential"].startswith("jgn_") and credential["name"] == "node-1"
    again = enrol(api, "node-1", token)
    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthenticated"
    # The node exists from enrolment on, and its credential registers it (not another name).
    me = bearer(credential["credential"])
    other = api.http.post("/v1/nodes", json={"name": "node-2"}, headers=me)
    assert other.status_code == 403 and other.json()["error"]["code"] == "wrong_node"
    own = api.http.post("/v1/nodes", json={"name": "node-1", "gpus": gpus("n1", 2)}, headers=me)
    assert own.status_code == 201 and own.json()["id"] == credential["node_id"]
    assert [n["name"] for n in api.http.get("/v1/nodes", headers=ADMIN).json()] == ["node-1"]


def test_expired_and_revoked_enrolment_tokens_enrol_nothing(api: Api) -> None:
    expiring = enrol_token(api.http, "node-1", ADMIN, ttl_s=60)
    api.clock.advance(60)
    assert enrol(api, "node-1", expiring).status_code == 401
    revoked = api.http.post("/v1/node-tokens", json={"node_name": "node-1"}, headers=ADMIN).json()
    r = api.http.delete(f"/v1/node-tokens/{revoked['id']}", headers=ADMIN)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert enrol(api, "node-1", revoked["key"]).status_code == 401
    assert api.http.get("/v1/nodes", headers=ADMIN).json() == []


def test_a_multi_use_token_enrols_again_and_the_old_credential_dies(api: Api) -> None:
    token = enrol_token(api.http, "node-1", ADMIN, single_use=False)
    first = enrol(api, "node-1", token).json()
    second = enrol(api, "node-1", token).json()
    assert first["node_id"] == second["node_id"]
    beat = f"/v1/nodes/{first['node_id']}/heartbeat"
    api.http.post("/v1/nodes", json={"name": "node-1"}, headers=bearer(second["credential"]))
    assert api.http.post(beat, json={}, headers=bearer(first["credential"])).status_code == 401
    assert api.http.post(beat, json={}, headers=bearer(second["credential"])).status_code == 200


def test_tenant_keys_and_node_credentials_cannot_enrol(api: Api) -> None:
    _, tenant = api.tenant()
    node = enrol_node(api.http, "node-1", ADMIN)
    for headers in (tenant, node.headers):
        r = api.http.post("/v1/nodes/enrol", json={"name": "node-2"}, headers=headers)
        assert r.status_code == 403, r.text
    no_token = api.http.post("/v1/nodes/enrol", json={"name": "node-2"})
    assert no_token.status_code == 401
    assert [n["name"] for n in api.http.get("/v1/nodes", headers=ADMIN).json()] == ["node-1"]


def test_secrets_are_stored_hashed_and_never_listed(api: Api, db: Database) -> None:
    token = enrol_token(api.http, "node-1", ADMIN)
    node = enrol_node(api.http, "node-2", ADMIN)
    listing = api.http.get("/v1/node-tokens", headers=ADMIN)
    assert listing.status_code == 200
    text = listing.text
    assert token not in text and node.credential not in text
    kinds = {(t["kind"], t["node_name"]) for t in listing.json()}
    assert kinds == {("enrolment", "node-1"), ("enrolment", "node-2"), ("credential", "node-2")}
    with db.read() as session:
        stored = [
            value
            for row in session.exec(select(EnrolTokenRow)).all()
            for value in row.model_dump().values()
        ] + [
            value
            for row in session.exec(select(ApiKeyRow)).all()
            for value in row.model_dump().values()
        ]
    assert token not in stored and node.credential not in stored


def test_revoking_a_credential_drains_its_node_and_closes_its_enrolment_tokens(
    api: Api,
) -> None:
    node = enrol_node(api.http, "node-1", ADMIN)
    api.http.post("/v1/nodes", json={"name": "node-1", "gpus": gpus("n1", 2)}, headers=node.headers)
    spare = enrol_token(api.http, "node-1", ADMIN, single_use=False)
    cred_id = next(
        t["id"]
        for t in api.http.get("/v1/node-tokens", headers=ADMIN).json()
        if t["kind"] == "credential"
    )
    r = api.http.delete(f"/v1/node-tokens/{cred_id}", headers=ADMIN)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    beat = api.http.post(f"/v1/nodes/{node.node_id}/heartbeat", json={}, headers=node.headers)
    assert beat.status_code == 401
    status = api.http.get(f"/v1/nodes/{node.node_id}", headers=ADMIN).json()["status"]
    assert status == "draining"
    events = api.http.get(f"/v1/events?object_id={node.node_id}", headers=ADMIN).json()
    credential_events = [e["to_state"] for e in events if e["kind"] == "node_credential"]
    assert credential_events == ["issued", "revoked"]
    # A token the admin issued earlier cannot undo the revocation.
    assert enrol(api, "node-1", spare).status_code == 401
    # Nothing new is placed on it.
    _, tenant = api.tenant(quota=2)
    hold = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=tenant).json()
    assert hold["gpus"] == []


def test_rotation_asked_by_the_admin_reaches_the_node_at_its_heartbeat(api: Api) -> None:
    node = enrol_node(api.http, "node-1", ADMIN)
    api.http.post("/v1/nodes", json={"name": "node-1"}, headers=node.headers)
    beat = f"/v1/nodes/{node.node_id}/heartbeat"
    assert api.http.post(beat, json={}, headers=node.headers).json()["rotate_credential"] is False
    asked = api.http.post(f"/v1/nodes/{node.node_id}/rotate", headers=ADMIN)
    assert asked.status_code == 202
    assert api.http.post(beat, json={}, headers=node.headers).json()["rotate_credential"] is True
    new = api.http.post(f"/v1/nodes/{node.node_id}/credentials", headers=node.headers)
    assert new.status_code == 201
    fresh = bearer(new.json()["credential"])
    assert api.http.post(beat, json={}, headers=node.headers).status_code == 401
    reply = api.http.post(beat, json={}, headers=fresh)
    assert reply.status_code == 200 and reply.json()["rotate_credential"] is False


def test_a_live_nodes_gpu_is_refused_to_another_node_until_the_admin_moves_it(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    a = enrol_node(api.http, "node-a", ADMIN)
    b = enrol_node(api.http, "node-b", ADMIN)
    api.http.post("/v1/nodes", json={"name": "node-a", "gpus": gpus("a", 2)}, headers=a.headers)
    _, tenant = api.tenant(quota=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 2}, headers=tenant).json()
    taken = api.http.post(
        "/v1/nodes", json={"name": "node-b", "gpus": gpus("a", 1)}, headers=b.headers
    )
    assert taken.status_code == 409, taken.text
    error = taken.json()["error"]
    assert error["code"] == "gpu_owned" and error["field"] == "gpus"
    assert "GPU-a-0" in error["message"] and "node-a" in error["message"]
    after = api.http.get(f"/v1/allocations/{alloc['id']}", headers=tenant).json()
    assert after["status"] == "allocated"
    assert {g["node"] for g in api.http.get("/v1/gpus", headers=ADMIN).json()} == {"node-a"}
    # The admin moves one GPU: what held it on node A ends, node B registers it.
    moved = api.http.post("/v1/gpus/GPU-a-0/move", json={"node_id": b.node_id}, headers=ADMIN)
    assert moved.status_code == 200 and moved.json()["node"] == "node-b"
    assert api.http.get(f"/v1/allocations/{alloc['id']}", headers=tenant).json()["status"] == (
        "lost"
    )
    ok = api.http.post(
        "/v1/nodes", json={"name": "node-b", "gpus": gpus("a", 1)}, headers=b.headers
    )
    assert ok.status_code == 201, ok.text
    # ...and node A, still live, cannot take it back by registering it.
    back = api.http.post(
        "/v1/nodes", json={"name": "node-a", "gpus": gpus("a", 2)}, headers=a.headers
    )
    assert back.status_code == 409 and back.json()["error"]["code"] == "gpu_owned"


def test_a_gpu_of_an_offline_node_may_show_up_on_another(
    api: Api, db: Database, settings: ServerSettings
) -> None:
    a = enrol_node(api.http, "node-a", ADMIN)
    b = enrol_node(api.http, "node-b", ADMIN)
    api.http.post("/v1/nodes", json={"name": "node-a", "gpus": gpus("a", 1)}, headers=a.headers)
    api.clock.advance(settings.heartbeat_timeout_s + 1)
    assert liveness(api.writer, settings, api.clock.now) >= 1
    r = api.http.post("/v1/nodes", json={"name": "node-b", "gpus": gpus("a", 1)}, headers=b.headers)
    assert r.status_code == 201, r.text
    assert [g["node"] for g in r.json()["gpus"]] == ["node-b"]


def test_move_names_a_missing_gpu_or_node(api: Api) -> None:
    node = api.node("n1", gpus=1)
    missing_gpu = api.http.post(
        "/v1/gpus/GPU-nope/move", json={"node_id": node["id"]}, headers=ADMIN
    )
    assert missing_gpu.status_code == 404
    missing_node = api.http.post(
        "/v1/gpus/GPU-n1-0/move", json={"node_id": "node_0000000000000000"}, headers=ADMIN
    )
    assert missing_node.status_code == 404 and missing_node.json()["error"]["field"] == "node_id"
    bad = api.http.post("/v1/gpus/GPU-n1-0/move", json={"node": node["id"]}, headers=ADMIN)
    assert bad.status_code == 422
