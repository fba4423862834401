"""The in-memory placement view stays true across replicas and rollbacks (both databases)."""

from __future__ import annotations

import pytest

from control_plane.db.engine import Database
from control_plane.schemas.allocations import AllocationCreate
from control_plane.schemas.nodes import NodeRegister
from control_plane.schemas.tenants import TenantCreate
from control_plane.services import allocations, nodes, placing, tenants


def _setup(db: Database, gpus: int = 2) -> str:
    nodes.register(
        db,
        body=NodeRegister(
            name="n1",
            gpus=[
                {"uuid": f"G{i}", "model": "A100", "memory_mb": 1, "index": i} for i in range(gpus)
            ],
        ),
        now=1.0,
    )
    return tenants.create_tenant(db, body=TenantCreate(name="t", quota_gpus=8), now=1.0).id


def _allocate(db: Database, tenant_id: str, now: float) -> tuple[int, str]:
    with db.write(placement=True) as session:
        status, alloc = allocations.create(
            session, tenant_id=tenant_id, body=AllocationCreate(gpu_count=1), now=now
        )
    return status, alloc.id


def test_second_replica_sees_what_the_first_freed(db_url: str, db: Database) -> None:
    tenant_id = _setup(db)
    other = Database(db_url)  # a second replica: its own engine, so its own cached view
    try:
        first = [_allocate(db, tenant_id, 2.0) for _ in range(2)]
        assert [s for s, _ in first] == [201, 201]
        # The other replica builds its view now: both GPUs taken.
        assert _allocate(other, tenant_id, 3.0)[0] == 202
        with db.write(placement=True) as session:
            allocations.release(session, tenant_id=tenant_id, allocation_id=first[0][1], now=4.0)
        # The pending request went onto the freed GPU in that same transaction, so free one
        # more on the first replica; the second must see it although its view was cached.
        with db.write(placement=True) as session:
            allocations.release(session, tenant_id=tenant_id, allocation_id=first[1][1], now=5.0)
        assert _allocate(other, tenant_id, 6.0)[0] == 201
        assert _allocate(db, tenant_id, 7.0)[0] == 202
    finally:
        other.dispose()


def test_rollback_discards_the_view_changes(db: Database) -> None:
    tenant_id = _setup(db, gpus=1)
    with pytest.raises(RuntimeError), db.write(placement=True) as session:
        allocations.create(
            session, tenant_id=tenant_id, body=AllocationCreate(gpu_count=1), now=2.0
        )
        assert placing.load_cluster(session).state.free_count() == 0
        raise RuntimeError("the use case fails after placing")
    # Nothing was committed, and the view must not remember the rolled-back placement.
    assert _allocate(db, tenant_id, 3.0)[0] == 201


def test_placement_needs_writers_to_take_turns(db: Database) -> None:
    _setup(db, gpus=1)
    if db.is_sqlite:
        # Every SQLite write is serialised already, so any write transaction may place.
        with db.write() as session:
            assert placing.load_cluster(session).state.free_count() == 1
        return
    with pytest.raises(RuntimeError, match="placement=True"), db.write() as session:
        placing.load_cluster(session)


def test_a_commit_keeps_its_exact_view_and_a_read_cannot_place(db: Database) -> None:
    tenant_id = _setup(db, gpus=2)
    assert _allocate(db, tenant_id, 2.0)[0] == 201
    kept = db.view_cache.value
    epoch = db.view_cache.epoch
    assert kept is not None and kept.state.free_count() == 1
    # The next placement moves the epoch by one and keeps the same view, updated in place.
    assert _allocate(db, tenant_id, 3.0)[0] == 201
    assert db.view_cache.value is kept and db.view_cache.epoch == epoch + 1
    assert kept.state.free_count() == 0
    with pytest.raises(RuntimeError, match="placement=True"), db.read() as session:
        placing.load_cluster(session)
