"""Allocate, release and task reports answer the same whichever path serves them: the hot
path for the ordinary request, the FastAPI route for the rest (forced here with a query
string)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.schemas.allocations import AllocationCreate
from tests.conftest import FakeClock
from tests.control_plane.conftest import ADMIN, Api
from tests.support.nodes import enrol_node

POST = "POST /v1/allocations"
DELETE = "DELETE /v1/allocations/{allocation_id}"
TASK = "POST /v1/nodes/{node_id}/allocations/{allocation_id}/task"


@pytest.fixture
def cached(db: Database, settings: ServerSettings, clock: FakeClock) -> Iterator[Api]:
    """The app as served: keys cached (the hot path needs a cached key), rate limits on."""
    settings.tenant_rate_per_s, settings.tenant_burst = 1.0, 12.0
    rate_clock = FakeClock()
    app = create_app(settings, db=db, clock=clock, key_cache_ttl_s=3600, rate_clock=rate_clock)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Api(http=http, clock=clock)


def served(api: Api, route: str, path: str) -> float:
    value = api.http.app.state.metrics.get_sample_value(  # type: ignore[attr-defined]
        "jitgpu_hot_route_requests_total", {"route": route, "path": path}
    )
    return value or 0.0


@pytest.mark.parametrize("path", ["hot", "framework"])
def test_allocate_and_release_answer_alike_on_both_paths(cached: Api, path: str) -> None:
    api = cached
    q = "" if path == "hot" else "?via=framework"
    api.node("n1", gpus=2)
    tenant_a, a = api.tenant("team-a", quota=2)
    _, b = api.tenant("team-b", quota=2)
    # The first request of a key looks it up through the route, which caches it.
    assert api.http.get("/v1/allocations", headers=a).status_code == 200
    assert api.http.get("/v1/allocations", headers=b).status_code == 200
    before = served(api, POST, path), served(api, DELETE, path)

    first = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 2}, headers=a)
    assert first.status_code == 201, first.text
    assert first.headers["content-type"] == "application/json"
    assert first.json()["status"] == "allocated" and len(first.json()["gpus"]) == 2
    # No GPU free: queued (202), not refused.
    queued = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 1}, headers=b)
    assert queued.status_code == 202 and queued.json()["status"] == "pending"
    # More than quota + burst can ever give: refused, naming the field.
    refused = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 64}, headers=a)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == {
        "code": "quota_exceeded",
        "message": refused.json()["error"]["message"],
        "field": "gpu_count",
    }
    # A retry with the same Idempotency-Key gets the first answer; another body with it, 409.
    keyed = {**b, "Idempotency-Key": "job-7"}
    once = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 1}, headers=keyed)
    again = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 1}, headers=keyed)
    assert once.status_code == again.status_code == 202
    assert once.json()["id"] == again.json()["id"]
    reused = api.http.post(f"/v1/allocations{q}", json={"gpu_count": 2}, headers=keyed)
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"

    # Another tenant's allocation does not exist for b; its owner and the admin release it.
    alloc_id = first.json()["id"]
    other = api.http.delete(f"/v1/allocations/{alloc_id}{q}", headers=b)
    assert other.status_code == 404 and other.json()["error"]["code"] == "not_found"
    released = api.http.delete(f"/v1/allocations/{alloc_id}{q}", headers=a)
    assert released.status_code == 200 and released.json()["status"] == "released"
    assert released.json()["tenant_id"] == tenant_a
    assert api.http.delete(f"/v1/allocations/{alloc_id}{q}", headers=ADMIN).status_code == 200
    missing = api.http.delete(f"/v1/allocations/alloc_{'0' * 16}{q}", headers=a)
    assert missing.status_code == 404
    # The queued request got the freed GPU.
    got = api.http.get(f"/v1/allocations/{queued.json()['id']}", headers=b).json()
    assert got["status"] == "allocated"

    # Past the tenant's rate (burst 12, 1/s on a clock that does not move): 429 with when to
    # come back, on either path.
    codes = [
        api.http.post(f"/v1/allocations{q}", json={"gpu_count": 1}, headers=a).status_code
        for _ in range(8)
    ]
    assert codes[-1] == 429 and 202 in codes
    limited = api.http.delete(f"/v1/allocations/{alloc_id}{q}", headers=a)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
    assert limited.headers["retry-after"] == "1"

    # Which path served them: all of them, on the one asked for.
    after = served(api, POST, path), served(api, DELETE, path)
    assert after[0] - before[0] == 6 + 8
    assert after[1] - before[1] == 5


def test_what_is_not_ordinary_goes_to_the_route_with_its_body(cached: Api) -> None:
    api = cached
    api.node("n1", gpus=4)
    _, a = api.tenant("team-a", quota=4)
    # A key not cached yet: served by the route, which caches it for the next request.
    assert api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=a).status_code == 201
    assert served(api, POST, "framework") == 1 and served(api, POST, "hot") == 0
    assert api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=a).status_code == 201
    assert served(api, POST, "hot") == 1

    # The route sees the whole body the hot path read: its 422 names the field.
    bad = api.http.post("/v1/allocations", json={"gpu_count": 0}, headers=a)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "gpu_count"
    unknown = api.http.post("/v1/allocations", json={"gpu_count": 1, "colour": 1}, headers=a)
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "colour"
    broken = api.http.post(
        "/v1/allocations",
        content=b'{"gpu_count": 1',
        headers={**a, "content-type": "application/json"},
    )
    assert broken.status_code == 422
    # Nested past the JSON decoder's depth: the route's 400, never a 500 from this path.
    deep = api.http.post(
        "/v1/allocations",
        content=b"[" * 50_000 + b"]" * 50_000,
        headers={**a, "content-type": "application/json"},
    )
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "bad_request"
    # An admin may not allocate; no key at all is 401; a key sent twice is the route's call.
    assert api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=ADMIN).status_code == 403
    assert api.http.post("/v1/allocations", json={"gpu_count": 1}).status_code == 401
    twice = api.http.post(
        "/v1/allocations",
        json={"gpu_count": 1},
        headers=[("Authorization", a["Authorization"]), ("Authorization", "Bearer other")],
    )
    assert twice.status_code == 201  # the first one, as Starlette reads headers
    long_key = {**a, "Idempotency-Key": "k" * 129}
    too_long = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=long_key)
    assert too_long.status_code == 422 and too_long.json()["error"]["field"] == "Idempotency-Key"
    # An id that cannot exist is the route's 422, never a lookup (a newline is not a match).
    odd = api.http.delete("/v1/allocations/alloc_0123456789abcdef%0A", headers=a)
    assert odd.status_code == 422
    assert served(api, POST, "hot") == 1
    assert served(api, POST, "framework") == 9
    assert served(api, DELETE, "hot") == 0


def test_the_hot_path_logs_and_times_under_the_route_template(cached: Api) -> None:
    api = cached
    api.node("n1", gpus=1)
    _, a = api.tenant("team-a", quota=1)
    api.http.get("/v1/allocations", headers=a)
    made = api.http.post(
        "/v1/allocations", json={"gpu_count": 1}, headers={**a, "X-Request-ID": "abc"}
    )
    assert made.status_code == 201 and made.headers["x-request-id"] == "abc"
    api.http.delete(f"/v1/allocations/{made.json()['id']}", headers=a)
    metrics = api.http.get("/metrics").text
    assert 'route="/v1/allocations",status="2xx"' in metrics
    assert 'route="/v1/allocations/{allocation_id}",status="2xx"' in metrics
    assert served(api, POST, "hot") == served(api, DELETE, "hot") == 1


@pytest.mark.parametrize("path", ["hot", "framework"])
def test_task_reports_answer_alike_on_both_paths(cached: Api, path: str) -> None:
    api = cached
    q = "" if path == "hot" else "?via=framework"
    n1, n2 = enrol_node(api.http, "n1", ADMIN), enrol_node(api.http, "n2", ADMIN)
    for node in (n1, n2):
        gpus = [{"uuid": f"GPU-{node.name}", "model": "A100", "memory_mb": 1, "index": 0}]
        body = {"name": node.name, "gpus": gpus}
        assert api.http.post("/v1/nodes", json=body, headers=node.headers).status_code == 201
    _, a = api.tenant("team-a", quota=2)
    api.http.get("/v1/allocations", headers=a)
    one = {"gpu_count": 1, "command": ["true"]}
    first = api.http.post("/v1/allocations", json=one, headers=a).json()
    second = api.http.post("/v1/allocations", json=one, headers=a).json()
    on_n1 = first if first["gpus"][0]["node"] == "n1" else second
    on_n2 = second if on_n1 is first else first
    queued = api.http.post("/v1/allocations", json=one, headers=a)
    assert queued.status_code == 202
    # The node's credential is cached by its first request (the route's own lookup).
    api.http.get(f"/v1/nodes/{n1.node_id}/work", headers=n1.headers)
    api.http.get(f"/v1/nodes/{n2.node_id}/work", headers=n2.headers)
    before = served(api, TASK, path)

    def report(node, alloc: dict, body: dict, headers=None):  # type: ignore[no-untyped-def]
        url = f"/v1/nodes/{node.node_id}/allocations/{alloc['id']}/task{q}"
        return api.http.post(url, json=body, headers=headers or node.headers)

    running = report(n1, on_n1, {"status": "running"})
    assert running.status_code == 200 and running.json()["task_status"] == "running"
    # Another node's allocation is not there for this node.
    assert report(n1, on_n2, {"status": "running"}).status_code == 404
    # An exit ends the allocation and hands its GPU to the request that waited.
    exited = report(n1, on_n1, {"status": "exited", "exit_code": 0})
    assert exited.status_code == 200 and exited.json()["status"] == "released"
    waited = api.http.get(f"/v1/allocations/{queued.json()['id']}", headers=a).json()
    assert waited["status"] == "allocated" and waited["gpus"][0]["node"] == "n1"
    # The admin may report too.
    assert report(n2, on_n2, {"status": "running"}, headers=ADMIN).status_code == 200
    assert served(api, TASK, path) - before == 4

    # Not ordinary, so the route's answer whichever path was asked for: a node acting as
    # another (403 wrong_node), a status that does not exist (422 naming the field).
    wrong = report(n2, on_n1, {"status": "running"}, headers=n1.headers)
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "wrong_node"
    bad = report(n2, on_n2, {"status": "sleeping"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "status"
    assert served(api, TASK, "hot") == (4 if path == "hot" else 0)


def test_an_unexpected_failure_on_the_hot_path_is_a_json_500(
    cached: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hot path runs in front of the framework's error middleware: it answers its own.
    api = cached
    api.node("n1", gpus=1)
    _, a = api.tenant("team-a", quota=1)
    api.http.get("/v1/allocations", headers=a)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(AllocationCreate, "model_validate", broken)
    answer = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=a)
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "internal_error"
    assert "a bug" not in answer.text


def test_a_body_over_the_limit_is_413_on_the_hot_path_too(cached: Api) -> None:
    api = cached
    _, a = api.tenant("team-a", quota=1)
    api.http.get("/v1/allocations", headers=a)
    limit = api.http.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    padding = {"gpu_count": 1, "pad": "y" * (limit + 10)}
    answer = api.http.post("/v1/allocations", json=padding, headers=a)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"
