"""A real control plane on loopback (SQLite) with one shared clock, for the agent-core tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.services.writer import GroupWriter
from predictors.types import Event, EventKind
from smart_agent.agent import Agent
from smart_agent.client import Client, RetryPolicy
from smart_agent.policy import Policy
from smart_agent.predictor_set import PredictorSet
from smart_agent.predlog import PredictionLog
from tests.conftest import ADMIN_TOKEN, FakeClock
from tests.support.liveserver import LiveServer

USER = "alice"

POLICY = Policy(
    min_confidence=0.3,
    predictors=["burst"],
    ensemble="off",
    lead_s=0,
    hold_ttl_s=600,
    max_gpus_per_hold=4,
    max_gpus_total=8,
)


@dataclass
class World:
    server: LiveServer
    db: Database
    settings: ServerSettings
    clock: FakeClock
    admin: httpx.Client
    tenant_id: str
    key: str
    client: Client
    log: PredictionLog

    def agent(self, policy: Policy, **kwargs: object) -> Agent:
        return Agent(
            user=USER,
            policy=policy,
            client=kwargs.pop("client", None) or self.client,
            log_=kwargs.pop("log_", None) or self.log,
            predictors=kwargs.pop("predictors", None) or PredictorSet(policy),
            clock=self.clock,
            **kwargs,
        )  # type: ignore[arg-type]

    @property
    def writer(self) -> GroupWriter:
        return self.server.writer

    def new_client(self) -> Client:
        return Client(self.server.url, self.key, retry=RetryPolicy(attempts=1))


@contextmanager
def make_world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings, clock) as server:
        # Set-up calls, not what is tested: a loaded machine may take over httpx's 5 s default.
        admin = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
        )
        admin.post(
            "/v1/nodes",
            json={
                "name": "n1",
                "gpus": [
                    {"uuid": f"GPU-{i}", "model": "A100", "memory_mb": 1, "index": i}
                    for i in range(8)
                ],
            },
        ).raise_for_status()
        tenant = admin.post("/v1/tenants", json={"name": USER, "quota_gpus": 8}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        client = Client(server.url, key, retry=RetryPolicy(attempts=1))
        log = PredictionLog(tmp_path / "predictions.db")
        try:
            yield World(server, db, settings, clock, admin, tenant["id"], key, client, log)
        finally:
            client.close()
            admin.close()
            log.close()
    db.dispose()


def feed_history(
    agent: Agent,
    clock: FakeClock,
    jobs: int = 8,
    gap: float = 120.0,
    gpus: int = 2,
    gpu_model: str | None = None,
) -> None:
    """Past jobs the agent learns from (not arrivals: they go straight to the history)."""
    for i in range(jobs):
        at = clock.advance(gap)
        agent.history.observe(
            Event(EventKind.JOB_STARTED, at, USER, gpus=gpus, gpu_model=gpu_model, job_id=f"h{i}")
        )
        agent.history.observe(
            Event(
                EventKind.JOB_FINISHED,
                at + 60,
                USER,
                gpus=gpus,
                gpu_model=gpu_model,
                duration_s=60,
                job_id=f"h{i}",
            )
        )
    clock.advance(70)
