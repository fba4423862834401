"""A small cluster in one SQLite file, copied per request: two tenants, two enrolled nodes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from tests.conftest import ADMIN_TOKEN, FakeClock
from tests.support.nodes import enrol_node

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class World:
    """Node B is the victim's node (path node); node A is the other node."""

    path: Path
    tenant_id: str
    other_tenant_id: str
    tenant_key_id: str
    node_a: str
    node_b: str
    node_b_credential_id: str
    hold_id: str
    allocation_id: str
    free_gpu: str
    headers: dict[str, dict[str, str]]

    @contextmanager
    def app(self, tmp: Path) -> Iterator[TestClient]:
        """A fresh copy of the world, so that what one request changes no other one sees."""
        tmp.mkdir(parents=True, exist_ok=True)
        copy = tmp / "world.db"
        shutil.copyfile(self.path, copy)
        db = Database(f"sqlite:///{copy}")
        try:
            with _client(db) as http:
                yield http
        finally:
            db.dispose()
            for f in tmp.glob("world.db*"):
                f.unlink()


@contextmanager
def _client(db: Database) -> Iterator[TestClient]:
    settings = ServerSettings(
        database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False, heartbeat_flush_s=0
    )
    app = create_app(settings, db=db, clock=FakeClock(), key_cache_ttl_s=0)
    yield TestClient(app, raise_server_exceptions=False)


def _ok(r, status: int = 200) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.text
    return r.json()


def build(folder: Path) -> World:
    path = folder / "template.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    try:
        with _client(db) as http:
            return _populate(http, path)
    finally:
        db.dispose()


def _populate(http: TestClient, path: Path) -> World:
    keys = {}
    tenants = {}
    for name in ("victim", "intruder"):
        tenant = _ok(
            http.post("/v1/tenants", json={"name": name, "quota_gpus": 8}, headers=ADMIN), 201
        )
        key = _ok(http.post(f"/v1/tenants/{tenant['id']}/api-keys", headers=ADMIN), 201)
        tenants[name], keys[name] = tenant["id"], key
    a = enrol_node(http, "node-a", ADMIN)
    b = enrol_node(http, "node-b", ADMIN)
    _ok(http.post("/v1/nodes", json={"name": "node-a"}, headers=a.headers), 201)
    gpus = [
        {"uuid": f"GPU-b-{i}", "model": "A100", "memory_mb": 81920, "index": i} for i in range(4)
    ]
    _ok(http.post("/v1/nodes", json={"name": "node-b", "gpus": gpus}, headers=b.headers), 201)
    # B's credential rotated once: the old one is the "revoked node" credential.
    rotated = _ok(http.post(f"/v1/nodes/{b.node_id}/credentials", headers=b.headers), 201)
    victim = bearer(keys["victim"]["key"])
    hold = _ok(http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 600}, headers=victim), 201)
    alloc = _ok(
        http.post(
            "/v1/allocations",
            json={"gpu_count": 1, "command": ["sleep", "600"], "use_holds": False},
            headers=victim,
        ),
        201,
    )
    used = {g["uuid"] for g in hold["gpus"] + alloc["gpus"]}
    return World(
        path=path,
        tenant_id=tenants["victim"],
        other_tenant_id=tenants["intruder"],
        tenant_key_id=keys["victim"]["id"],
        node_a=a.node_id,
        node_b=b.node_id,
        node_b_credential_id=rotated["credential_id"],
        hold_id=hold["id"],
        allocation_id=alloc["id"],
        free_gpu=sorted({g["uuid"] for g in gpus} - used)[0],
        headers={
            "none": {},
            "tenant": victim,
            "other_tenant": bearer(keys["intruder"]["key"]),
            "node": bearer(rotated["credential"]),
            "other_node": a.headers,
            "revoked_node": b.headers,
            "admin": ADMIN,
        },
    )
