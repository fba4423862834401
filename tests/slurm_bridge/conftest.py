"""A live Slurm cluster, the control plane (real app, SQLite, wall clock) and a bridge between."""

from __future__ import annotations

import getpass
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.jobs.registry import run_all
from control_plane.slurm_bridge.bridge import Bridge, BridgeClient
from control_plane.slurm_bridge.config import BridgeConfig, SlurmAccount
from control_plane.slurm_bridge.slurm import Slurm
from tests.conftest import ADMIN_TOKEN
from tests.support.procs import wait_for
from tests.support.slurm_cluster import ALWAYS_ON, CLOUD, SlurmCluster, start_or_skip

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class World:
    slurm: SlurmCluster
    http: TestClient
    db: Database
    settings: ServerSettings
    bridge: Bridge
    tenant: dict  # alice's auth header
    state_file: Path

    def tick(self) -> None:
        """One round of the control plane's periodic jobs, then one bridge step."""
        now = time.time()
        run_all(self.db, self.settings, now)
        self.bridge.step(now)

    def until(self, check, what: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
        def probe():  # type: ignore[no-untyped-def]
            self.tick()
            return check()

        return wait_for(probe, timeout=timeout, what=what, interval=0.3)

    def hold(self, **body: object) -> dict:
        r = self.http.post("/v1/holds", json={"gpu_count": 2, **body}, headers=self.tenant)
        assert r.status_code == 201, r.text
        return r.json()

    def get_hold(self, hold_id: str) -> dict:
        return self.http.get(f"/v1/holds/{hold_id}", headers=self.tenant).json()

    def reservations(self) -> dict:
        return self.bridge.slurm.reservations("jitgpu-")

    def new_bridge(self) -> Bridge:
        """A restarted bridge: nothing in memory, the same state file."""
        cfg = self.bridge.cfg
        client = BridgeClient("http://testserver", "", http=self.http)
        return Bridge(cfg, Slurm(env=self.slurm.env), client)


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    # A test may ask for accounting (slurmdbd), as most sites have: `accounting` as its param.
    accounting = getattr(request, "param", None) == "accounting"
    cluster = start_or_skip(boot_delay_s=3.0, suspend_time_s=8, accounting=accounting)
    db = Database(f"sqlite:///{tmp_path / 'jitgpu.db'}")
    try:
        upgrade(db)
        settings = ServerSettings(database_url=str(db.url), admin_token=ADMIN_TOKEN, run_jobs=False)
        app = create_app(settings, db=db, clock=time.time, key_cache_ttl_s=0)
        with TestClient(app, raise_server_exceptions=False) as http:
            r = http.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}, headers=ADMIN)
            tenant_id = r.json()["id"]
            key = http.post(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN).json()["key"]
            # One enrolment token per Slurm node; the credentials they buy are kept on disk,
            # so that a restarted bridge acts as the same nodes.
            enrol = {
                name: http.post("/v1/node-tokens", json={"node_name": name}, headers=ADMIN).json()[
                    "key"
                ]
                for name in (ALWAYS_ON, CLOUD)
            }
            state_file = tmp_path / "bridge.json"
            cfg = BridgeConfig(
                server="http://testserver",
                enrol_tokens=enrol,
                credentials_dir=tmp_path,
                poll_s=0.3,
                resume_latency_s=5.0,
                # The tests run as one Unix user: alice's jobs are that user's.
                tenants={"alice": SlurmAccount(users=getpass.getuser())},
                state_file=state_file,
                gpu_model="A100",
            )
            client = BridgeClient(cfg.server, "", http=http)
            bridge = Bridge(cfg, Slurm(env=cluster.env), client)
            yield World(
                slurm=cluster,
                http=http,
                db=db,
                settings=settings,
                bridge=bridge,
                tenant={"Authorization": f"Bearer {key}"},
                state_file=state_file,
            )
    finally:
        cluster.stop()
        db.dispose()
