"""Migration 0004 (node identity) keeps a running deployment's nodes, keys and allocations."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import text

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import current_revision, head_revision, upgrade
from control_plane.services.auth import hash_key
from tests.conftest import ADMIN_TOKEN, FakeClock

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
TENANT_KEY = "jgt_tenant-key-from-before-node-identity"
OLD_NODE_TOKEN = "jgn_node-token-from-before-node-identity"
T0 = 1_790_000_000.0

ROWS = [
    (
        "INSERT INTO tenant (id, name, quota_gpus, burst_gpus, weight, created_at, max_held_gpus,"
        " max_idle_gpu_hours_per_day, max_hold_ttl_s, holds_may_preempt_holds, usage_gpu_s,"
        " usage_at) VALUES ('tnt_0000000000000001', 'alice', 8, 0, 1.0, :t, 8, 8.0, 3600,"
        " false, 0.0, :t)"
    ),
    (
        "INSERT INTO api_key (id, key_hash, prefix, scope, tenant_id, created_at) VALUES"
        " ('key_0000000000000001', :tenant_hash, 'jgt_tenant', 'tenant', 'tnt_0000000000000001',"
        " :t), ('key_0000000000000002', :node_hash, 'jgn_node-t', 'node', NULL, :t)"
    ),
    (
        "INSERT INTO node (id, name, spine, leaf, status, registered_at, last_heartbeat_at)"
        " VALUES ('node_0000000000000001', 'gpu-host-1', 'spine0', 'leaf0', 'online', :t, :t)"
    ),
    (
        'INSERT INTO gpu (uuid, node_id, "index", model, memory_mb, healthy, present) VALUES'
        " ('GPU-old-0', 'node_0000000000000001', 0, 'A100', 81920, true, true),"
        " ('GPU-old-1', 'node_0000000000000001', 1, 'A100', 81920, true, true)"
    ),
    (
        "INSERT INTO allocation (id, tenant_id, status, gpu_count, warm, requested_at,"
        " allocated_at, ready_at, expires_at, lease_s, strategy, job_class) VALUES"
        " ('alloc_0000000000000001', 'tnt_0000000000000001', 'allocated', 1, false, :t, :t, :t,"
        " :end, 86400, 'consolidated', 'batch')"
    ),
    (
        "INSERT INTO assignment (gpu_uuid, node_id, allocation_id, started_at) VALUES"
        " ('GPU-old-0', 'node_0000000000000001', 'alloc_0000000000000001', :t)"
    ),
]


def test_upgrading_from_0003_keeps_nodes_keys_and_allocations(empty_db_url: str) -> None:
    db = Database(empty_db_url)
    try:
        upgrade(db, "0003")
        with db.engine.begin() as conn:
            values = {
                "t": T0,
                "end": T0 + 86400,
                "tenant_hash": hash_key(TENANT_KEY),
                "node_hash": hash_key(OLD_NODE_TOKEN),
            }
            for statement in ROWS:
                conn.execute(text(statement), values)
        upgrade(db)
        assert current_revision(db) == head_revision() != "0003"
        clock = FakeClock(T0 + 1)
        settings = ServerSettings(
            database_url=empty_db_url, admin_token=ADMIN_TOKEN, run_jobs=False, heartbeat_flush_s=0
        )
        with TestClient(create_app(settings, db=db, clock=clock, key_cache_ttl_s=0)) as http:
            _check_after_upgrade(http)
    finally:
        db.dispose()


def _check_after_upgrade(http: TestClient) -> None:
    # Nodes, GPUs and who holds them survive.
    [node] = http.get("/v1/nodes", headers=ADMIN).json()
    assert (node["id"], node["name"], node["status"]) == (
        "node_0000000000000001",
        "gpu-host-1",
        "online",
    )
    owners = {g["uuid"]: g["assigned_to"] for g in node["gpus"]}
    assert owners == {"GPU-old-0": "alloc_0000000000000001", "GPU-old-1": None}
    # The tenant's key still works and its allocation is still allocated.
    tenant = {"Authorization": f"Bearer {TENANT_KEY}"}
    alloc = http.get("/v1/allocations/alloc_0000000000000001", headers=tenant)
    assert alloc.status_code == 200, alloc.text
    assert alloc.json()["status"] == "allocated"
    # The old node token no longer acts as a node: it may enrol the node once, no more.
    old = {"Authorization": f"Bearer {OLD_NODE_TOKEN}"}
    beat = http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=old)
    assert beat.status_code == 403 and beat.json()["error"]["code"] == "enrolment_required"
    enrolled = http.post("/v1/nodes/enrol", json={"name": "gpu-host-1"}, headers=old)
    assert enrolled.status_code == 201, enrolled.text
    assert enrolled.json()["node_id"] == node["id"]
    again = http.post("/v1/nodes/enrol", json={"name": "gpu-host-1"}, headers=old)
    assert again.status_code == 403 and again.json()["error"]["code"] == "already_enrolled"
    # With its own credential the node heartbeats and is told to keep its allocation.
    mine = {"Authorization": f"Bearer {enrolled.json()['credential']}"}
    reply = http.post(f"/v1/nodes/{node['id']}/heartbeat", json={}, headers=mine)
    assert reply.status_code == 200, reply.text
    assert [a["id"] for a in reply.json()["assignments"]] == ["alloc_0000000000000001"]
    assert (
        http.get("/v1/allocations/alloc_0000000000000001", headers=tenant).json()["status"]
        == "allocated"
    )
