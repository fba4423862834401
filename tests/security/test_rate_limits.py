"""Per-key rate limits: tenants, nodes and anonymous callers (by IP) each get a token bucket;
admin is exempt; over the rate is a 429 with Retry-After and the JSON error body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.config import ConfigError, ServerSettings, load_settings
from control_plane.db.engine import Database
from tests.conftest import ADMIN_TOKEN, FakeClock
from tests.support.nodes import enrol_node

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
LOW = {
    "tenant_rate_per_s": 2.0,
    "tenant_burst": 3.0,
    "node_rate_per_s": 1.0,
    "node_burst": 2.0,
    "anonymous_rate_per_s": 1.0,
    "anonymous_burst": 3.0,
}


@pytest.fixture
def rate_clock() -> FakeClock:
    return FakeClock(start=1000.0)


@pytest.fixture
def http(db: Database, db_url: str, rate_clock: FakeClock) -> Iterator[TestClient]:
    settings = ServerSettings(database_url=db_url, admin_token=ADMIN_TOKEN, run_jobs=False, **LOW)
    app = create_app(settings, db=db, clock=FakeClock(), key_cache_ttl_s=0, rate_clock=rate_clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _tenant_key(http: TestClient, name: str) -> tuple[str, dict]:
    tenant = http.post("/v1/tenants", json={"name": name, "quota_gpus": 1}, headers=ADMIN).json()
    key = http.post(f"/v1/tenants/{tenant['id']}/api-keys", headers=ADMIN).json()["key"]
    return tenant["id"], {"Authorization": f"Bearer {key}"}


def _refused(r) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limited"
    assert int(r.headers["Retry-After"]) >= 1


def test_a_tenant_over_its_rate_gets_429_then_recovers(
    http: TestClient, rate_clock: FakeClock
) -> None:
    _, headers = _tenant_key(http, "a")
    for _ in range(3):  # the burst
        assert http.get("/v1/allocations", headers=headers).status_code == 200
    _refused(http.get("/v1/allocations", headers=headers))
    rate_clock.advance(1.0)  # 2 tokens back
    assert http.get("/v1/allocations", headers=headers).status_code == 200
    assert http.get("/v1/allocations", headers=headers).status_code == 200
    _refused(http.get("/v1/allocations", headers=headers))


def test_keys_of_one_tenant_share_its_bucket_and_other_tenants_are_unaffected(
    http: TestClient,
) -> None:
    tenant_id, first = _tenant_key(http, "a")
    second_key = http.post(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN).json()["key"]
    second = {"Authorization": f"Bearer {second_key}"}
    _, other = _tenant_key(http, "b")
    for _ in range(3):
        assert http.get("/v1/allocations", headers=first).status_code == 200
    _refused(http.get("/v1/allocations", headers=second))  # a new key buys no more requests
    assert http.get("/v1/allocations", headers=other).status_code == 200


def test_node_keys_have_their_own_bucket(http: TestClient) -> None:
    node = http.post(
        "/v1/nodes",
        json={"name": "n1", "gpus": [{"uuid": "GPU-1", "model": "A100", "memory_mb": 1}]},
        headers=ADMIN,
    ).json()
    token = enrol_node(http, "n1", ADMIN).credential
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(2):
        r = http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=headers)
        assert r.status_code == 200, r.text
    _refused(http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=headers))


def test_admin_is_never_limited(http: TestClient) -> None:
    for _ in range(50):
        assert http.get("/v1/tenants", headers=ADMIN).status_code == 200


def test_anonymous_requests_and_bad_keys_count_against_the_address(
    http: TestClient, rate_clock: FakeClock
) -> None:
    for _ in range(3):
        assert http.get("/healthz").status_code == 200
    _refused(http.get("/healthz"))
    rate_clock.advance(2.0)
    # Guessing keys: each wrong one is a 401 until the address is out of tokens.
    bad = {"Authorization": "Bearer not-a-real-key-000000"}
    assert http.get("/v1/allocations", headers=bad).status_code == 401
    assert http.get("/v1/allocations", headers=bad).status_code == 401
    _refused(http.get("/v1/allocations", headers=bad))
    # A valid key from the same address is not held back by that.
    _, headers = _tenant_key(http, "a")
    assert http.get("/v1/allocations", headers=headers).status_code == 200


def test_defaults_and_configuration() -> None:
    defaults = ServerSettings()
    assert (defaults.tenant_rate_per_s, defaults.tenant_burst) == (1000.0, 2000.0)
    assert defaults.node_rate_per_s == 5000.0 and defaults.anonymous_rate_per_s == 200.0
    got = load_settings(env={"JITGPU_TENANT_RATE_PER_S": "50", "JITGPU_RATE_LIMITS": "false"})
    assert got.tenant_rate_per_s == 50.0 and got.rate_limits is False
    with pytest.raises(ConfigError, match="tenant_rate_per_s"):
        load_settings(env={"JITGPU_TENANT_RATE_PER_S": "-1"})


def test_limits_can_be_turned_off(db: Database, db_url: str) -> None:
    settings = ServerSettings(
        database_url=db_url, admin_token=ADMIN_TOKEN, run_jobs=False, rate_limits=False, **LOW
    )
    with TestClient(create_app(settings, db=db, key_cache_ttl_s=0)) as http:
        for _ in range(10):
            assert http.get("/healthz").status_code == 200
