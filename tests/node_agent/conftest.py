"""A real control plane in-process (ASGI app on SQLite) and node agents talking to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.node_agent.agent import Agent
from control_plane.node_agent.client import ControlPlane
from control_plane.node_agent.simulated import SimulatedBackend
from tests.conftest import ADMIN_TOKEN, FakeClock
from tests.node_agent.helpers import base_env, make_config
from tests.support.nodes import enrol_token

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class ControlPlaneApp:
    """The app, its client and one tenant's key."""

    http: TestClient
    clock: FakeClock
    tenant: dict[str, str] = field(default_factory=dict)
    db: Database | None = None

    def enrol_token(self, name: str) -> str:
        return enrol_token(self.http, name, ADMIN)

    def get(self, path: str) -> Any:
        r = self.http.get(path, headers=ADMIN)
        assert r.status_code == 200, r.text
        return r.json()

    def hold(self, **body: Any) -> dict:
        r = self.http.post("/v1/holds", json={"ttl_s": 600, **body}, headers=self.tenant)
        assert r.status_code == 201, r.text
        return r.json()

    def claim(self, hold_id: str, **body: Any) -> dict:
        r = self.http.post(f"/v1/holds/{hold_id}/claim", json=body, headers=self.tenant)
        assert r.status_code == 201, r.text
        return r.json()

    def allocation(self, alloc_id: str) -> dict:
        return self.get(f"/v1/allocations/{alloc_id}")

    def node(self, name: str) -> dict:
        return next(n for n in self.get("/v1/nodes") if n["name"] == name)


def start_app(tmp_path: Path, name: str = "jitgpu.db") -> tuple[TestClient, FakeClock, Database]:
    db = Database(f"sqlite:///{tmp_path / name}")
    settings = ServerSettings(
        database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False, heartbeat_flush_s=0
    )
    clock = FakeClock()
    app = create_app(settings, db=db, clock=clock, key_cache_ttl_s=0)
    return TestClient(app, raise_server_exceptions=True), clock, db


@pytest.fixture
def cp(tmp_path: Path) -> Iterator[ControlPlaneApp]:
    http, clock, db = start_app(tmp_path)
    with http:
        tenant = http.post("/v1/tenants", json={"name": "t1", "quota_gpus": 8}, headers=ADMIN)
        key = http.post(f"/v1/tenants/{tenant.json()['id']}/api-keys", headers=ADMIN).json()
        yield ControlPlaneApp(http, clock, db=db, tenant={"Authorization": f"Bearer {key['key']}"})
    db.dispose()


AgentFactory = Callable[..., Agent]


@pytest.fixture
def make_agent(cp: ControlPlaneApp, tmp_path: Path) -> Iterator[AgentFactory]:
    made: list[Agent] = []

    def factory(name: str = "node-1", gpus: int = 2, **values: Any) -> Agent:
        # Each agent enrols itself, as `jitgpu node` does with JITGPU_ENROL_TOKEN; one made
        # again under a name finds that node's stored credential and uses it.
        values.setdefault("enrol_token", cp.enrol_token(name))
        env = values.pop("env", None)
        cfg = make_config(tmp_path, simulated={"count": gpus, "model": "A100"}, **values)
        backend = SimulatedBackend(
            node=name,
            count=gpus,
            model="A100",
            memory_mb=81920,
            faults_file=tmp_path / f"faults-{name}.json",
            env={},
        )
        client = ControlPlane("http://testserver", "", http=cp.http)
        agent = Agent(cfg, backend, client, name=name, env=base_env() if env is None else env)
        made.append(agent)
        return agent

    yield factory
    for agent in made:
        agent.work.stop_all(1.0)


def settle(agent: Agent, timeout: float = 20.0) -> None:
    """Let every warm-up finish, then send what is due (no sleeping: threads are joined)."""
    work = agent.work
    for owner in [*work.holds.values(), *work.allocations.values()]:
        if owner.warmup is not None:
            owner.warmup.join(timeout)
            assert owner.warmup.done, f"warm-up of {owner.id} did not finish"
    agent.flush()


def finish_tasks(agent: Agent, timeout: float = 20.0) -> None:
    for alloc in list(agent.work.allocations.values()):
        if alloc.task is not None:
            alloc.task.join(timeout)
            assert alloc.task.finished, f"task of {alloc.id} did not finish"
    agent.flush()
