"""Fixtures for service tests through the real ASGI app on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, AssignmentRow
from control_plane.schemas.allocations import AllocationCreate
from control_plane.services import allocations
from control_plane.services.idempotency import UseCase
from control_plane.services.writer import GroupWriter
from tests.conftest import ADMIN_TOKEN, FakeClock

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class Api:
    """The test client plus shortcuts for the set-up every test repeats."""

    http: TestClient
    clock: FakeClock

    @property
    def writer(self) -> GroupWriter:
        """The app's writer: periodic jobs a test runs by hand take their turn through it."""
        return self.http.app.state.writer  # type: ignore[attr-defined]

    def tenant(self, name: str = "team-a", quota: int = 8, **extra: object) -> tuple[str, dict]:
        r = self.http.post(
            "/v1/tenants", json={"name": name, "quota_gpus": quota, **extra}, headers=ADMIN
        )
        assert r.status_code == 201, r.text
        tenant_id = r.json()["id"]
        k = self.http.post(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN)
        assert k.status_code == 201, k.text
        return tenant_id, {"Authorization": f"Bearer {k.json()['key']}"}

    def node(
        self,
        name: str = "node-1",
        gpus: int = 8,
        model: str = "A100",
        leaf: str = "leaf0",
        spine: str = "spine0",
    ) -> dict:
        body = {
            "name": name,
            "spine": spine,
            "leaf": leaf,
            "gpus": [
                {"uuid": f"GPU-{name}-{i}", "model": model, "memory_mb": 81920, "index": i}
                for i in range(gpus)
            ],
        }
        r = self.http.post("/v1/nodes", json=body, headers=ADMIN)
        assert r.status_code == 201, r.text
        return r.json()

    def policy(self, tenant_id: str, **values: object) -> dict:
        current = self.http.get(f"/v1/policies/{tenant_id}", headers=ADMIN).json()
        body = {
            k: current[k]
            for k in (
                "max_held_gpus",
                "max_idle_gpu_hours_per_day",
                "max_hold_ttl_s",
                "allowed_warmups",
                "holds_may_preempt_holds",
                "idle_budget",
            )
        }
        body.update(values)
        r = self.http.put(f"/v1/policies/{tenant_id}", json=body, headers=ADMIN)
        assert r.status_code == 200, r.text
        return r.json()


# Use cases for tests that drive the writer (`GroupWriter.apply_batch`) directly.


def allocate(tenant_id: str, gpus: int = 1) -> UseCase:
    """The use case of `POST /v1/allocations` for `gpus` GPUs, holds not used."""
    body = AllocationCreate(gpu_count=gpus, use_holds=False)
    return lambda session, now: allocations.create(session, tenant_id=tenant_id, body=body, now=now)


def release(tenant_id: str, allocation_id: str) -> UseCase:
    """The use case of `DELETE /v1/allocations/{id}`."""
    return lambda session, now: (
        200,
        allocations.release(session, tenant_id=tenant_id, allocation_id=allocation_id, now=now),
    )


def counts(db: Database) -> tuple[int, int]:
    """Allocations ever made, and GPU assignments active now."""
    with db.read() as session:
        allocs = session.execute(select(func.count()).select_from(AllocationRow)).scalar_one()
        active = session.execute(
            select(func.count()).select_from(AssignmentRow).where(AssignmentRow.ended_at.is_(None))  # type: ignore[union-attr]
        ).scalar_one()
    return allocs, active


@pytest.fixture
def settings(db_url: str) -> ServerSettings:
    return ServerSettings(database_url=db_url, admin_token=ADMIN_TOKEN, run_jobs=False)


@pytest.fixture
def api(db: Database, settings: ServerSettings, clock: FakeClock) -> Iterator[Api]:
    app = create_app(settings, db=db, clock=clock, key_cache_ttl_s=0)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Api(http=http, clock=clock)
