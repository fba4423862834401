"""Queueing beyond the quota: the quota limits what runs, a per-tenant limit what waits."""

from __future__ import annotations

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from control_plane.config import ConfigError, ServerSettings, load_settings
from tests.control_plane.conftest import ADMIN, Api


@pytest.fixture
def settings(settings: ServerSettings, request: pytest.FixtureRequest) -> ServerSettings:
    limit = getattr(request, "param", 3)
    return settings.model_copy(update={"max_queued_per_tenant": limit})


def _ask(api: Api, headers: dict, gpus: int = 1) -> tuple[int, dict]:
    api.clock.advance(1)  # distinct submission times: the queue is first come, first served
    r = api.http.post("/v1/allocations", json={"gpu_count": gpus}, headers=headers)
    return r.status_code, r.json()


def test_requests_beyond_the_quota_wait_and_run_as_the_quota_frees(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=1)
    status, running = _ask(api, headers)
    assert status == 201
    waiting = [_ask(api, headers) for _ in range(3)]
    assert [s for s, _ in waiting] == [202, 202, 202]
    assert all(b["status"] == "pending" and b["gpus"] == [] for _, b in waiting)
    # Past the tenant's limit on waiting requests: 429, naming what is full.
    status, refused = _ask(api, headers)
    assert status == 429 and refused["error"]["code"] == "queue_full"
    assert "3 requests" in refused["error"]["message"]
    api.clock.advance(5)
    api.http.delete(f"/v1/allocations/{running['id']}", headers=headers)
    # The oldest waiting request runs; the tenant still runs only its quota.
    shown = [api.http.get(f"/v1/allocations/{b['id']}", headers=headers).json() for _, b in waiting]
    assert [a["status"] for a in shown] == ["allocated", "pending", "pending"]
    # No warm-up measured its GPUs, so the figure is unknown; the note gives the wait.
    assert shown[0]["time_to_gpu_s"] is None
    assert "assigned 8.0s after the request" in shown[0]["time_to_gpu_note"]
    # One left the queue, so one more may join it.
    assert _ask(api, headers)[0] == 202
    assert _ask(api, headers)[0] == 429


def test_cancelling_a_waiting_request_makes_room_in_the_queue(api: Api) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=1)
    assert _ask(api, headers)[0] == 201
    waiting = [_ask(api, headers)[1] for _ in range(3)]
    assert _ask(api, headers)[0] == 429
    gone = api.http.delete(f"/v1/allocations/{waiting[1]['id']}", headers=headers)
    assert gone.json()["status"] == "cancelled"
    assert _ask(api, headers)[0] == 202


def test_a_new_request_does_not_jump_its_tenants_own_queue(api: Api) -> None:
    api.node("n1", gpus=4)
    tenant_id, headers = api.tenant(quota=2)
    first = [_ask(api, headers)[1] for _ in range(2)]
    assert _ask(api, headers)[0] == 202  # over quota: waits
    # Raise the quota: the next request finds room but queues behind the waiting one, and the
    # queue then serves both in order.
    r = api.http.patch(f"/v1/tenants/{tenant_id}", json={"quota_gpus": 4}, headers=ADMIN)
    assert r.status_code == 200, r.text
    status, late = _ask(api, headers)
    assert status == 201 and late["status"] == "allocated"
    listed = api.http.get("/v1/allocations", headers=headers).json()
    assert sorted(a["status"] for a in listed) == ["allocated"] * 4
    assert {g["uuid"] for a in first for g in a["gpus"]}.isdisjoint(
        {g["uuid"] for g in late["gpus"]}
    )


@pytest.mark.parametrize("settings", [1000], indirect=True)
def test_a_deep_queue_does_not_hide_a_light_tenants_request(api: Api) -> None:
    """Fair share orders the queue across tenants, however many requests one of them queued."""
    api.node("n1", gpus=2)
    _, heavy = api.tenant("heavy", quota=2)
    _, light = api.tenant("light", quota=2)
    running = [_ask(api, heavy)[1] for _ in range(2)]
    # More waiting requests than the queue reads per tenant in one pass (and than it once read
    # in all, oldest first, which left the light tenant's request unread).
    for _ in range(210):
        assert _ask(api, heavy)[0] == 202
    api.clock.advance(100)
    status, waiting = _ask(api, light)
    assert status == 202  # no GPU free
    api.clock.advance(10)
    api.http.delete(f"/v1/allocations/{running[0]['id']}", headers=heavy)
    # The heavy tenant has used GPUs, the light one none: the light one is served first
    # although the heavy tenant's requests waited longer.
    shown = api.http.get(f"/v1/allocations/{waiting['id']}", headers=light).json()
    assert shown["status"] == "allocated"


def test_queue_limit_is_a_setting_checked_with_its_name() -> None:
    assert ServerSettings().max_queued_per_tenant == 10_000
    env = {"JITGPU_MAX_QUEUED_PER_TENANT": "25"}
    assert load_settings(env=env).max_queued_per_tenant == 25
    with pytest.raises(ConfigError, match="max_queued_per_tenant"):
        load_settings(env={"JITGPU_MAX_QUEUED_PER_TENANT": "-1"})


def test_a_queued_request_displaces_another_tenants_hold_when_its_turn_comes(api: Api) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    _, other = api.tenant("team-b", quota=2)
    status, running = _ask(api, headers)
    assert status == 201
    r = api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600}, headers=other)
    assert r.status_code == 201
    hold = r.json()
    # 1 running + 2 asked > quota 2: it waits for the tenant's own GPU, not for the hold's.
    status, waiting = _ask(api, headers, gpus=2)
    assert status == 202
    api.clock.advance(5)
    api.http.delete(f"/v1/allocations/{running['id']}", headers=headers)
    shown = api.http.get(f"/v1/allocations/{waiting['id']}", headers=headers).json()
    assert shown["status"] == "allocated"
    assert len(shown["gpus"]) == 2
    assert shown["preempted_holds"] == [hold["id"]]
    ended = api.http.get(f"/v1/holds/{hold['id']}", headers=other).json()
    assert ended["status"] == "preempted"
    # One event per state: queued, then placed (with the displacement named).
    events = api.http.get("/v1/events", params={"object_id": waiting["id"]}, headers=headers)
    assert [e["to_state"] for e in events.json()] == ["pending", "allocated"]


def test_a_release_counts_its_own_usage_when_it_picks_the_next_request(api: Api) -> None:
    # The release reads the queue before its usage charge is written (one round trip on
    # PostgreSQL); the order must still count the work that just ended.
    api.node("n1", gpus=1)
    _, heavy = api.tenant("heavy", quota=1)
    _, light = api.tenant("light", quota=1)
    status, running = _ask(api, heavy)
    assert status == 201
    status, heavy_next = _ask(api, heavy)  # waits first...
    assert status == 202
    status, light_next = _ask(api, light)  # ...then the tenant that has run nothing
    assert status == 202
    api.clock.advance(3600)
    api.http.delete(f"/v1/allocations/{running['id']}", headers=heavy)
    light_now = api.http.get(f"/v1/allocations/{light_next['id']}", headers=light).json()
    heavy_now = api.http.get(f"/v1/allocations/{heavy_next['id']}", headers=heavy).json()
    assert (light_now["status"], heavy_now["status"]) == ("allocated", "pending")


@pytest.mark.parametrize("settings", [1000], indirect=True)
def test_a_full_cluster_tries_each_queued_shape_once(api: Api) -> None:
    """A tenant under its limit queues on a cluster another tenant fills: a pass over its
    queue tries one placement per shape, so a request costs the same behind 10 waiting
    requests as behind 60 (it was one read of the placed holds per waiting request)."""
    api.node("n1", gpus=2)
    _, other = api.tenant("other", quota=2)
    _, mine = api.tenant("mine", quota=64)
    for _ in range(2):
        assert _ask(api, other)[0] == 201

    def statements_of_one_more() -> int:
        seen: list[str] = []

        def count(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
            seen.append(statement)

        event.listen(Engine, "before_cursor_execute", count)
        try:
            assert _ask(api, mine)[0] == 202
        finally:
            event.remove(Engine, "before_cursor_execute", count)
        return len(seen)

    for _ in range(10):
        assert _ask(api, mine)[0] == 202
    behind_10 = statements_of_one_more()
    for _ in range(50):
        assert _ask(api, mine)[0] == 202
    assert statements_of_one_more() == behind_10


def test_a_shape_that_does_not_fit_does_not_hold_back_a_smaller_one(api: Api) -> None:
    api.node("n1", gpus=3)
    _, other = api.tenant("other", quota=2)
    _, mine = api.tenant("mine", quota=8)
    status, running = _ask(api, other, gpus=2)
    assert status == 201
    status, big = _ask(api, mine, gpus=2)
    assert status == 202  # one GPU free
    # Behind its own waiting request, then served in the same pass: the 2-GPU shape did not
    # fit, the 1-GPU one does.
    status, small = _ask(api, mine)
    assert status == 201 and small["status"] == "allocated"
    status, third = _ask(api, mine)
    assert status == 202  # the cluster is full now
    api.clock.advance(5)
    api.http.delete(f"/v1/allocations/{running['id']}", headers=other)
    shown = {
        name: api.http.get(f"/v1/allocations/{a['id']}", headers=mine).json()["status"]
        for name, a in (("big", big), ("third", third))
    }
    # Two GPUs came back: the oldest request, the 2-GPU one, takes them.
    assert shown == {"big": "allocated", "third": "pending"}
