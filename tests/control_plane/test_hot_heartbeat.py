"""A node's heartbeat answers the same whichever path serves it, and the hot path's key check
keeps the cache's promise: a key revoked elsewhere is refused once its entry is stale."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from control_plane.api.app import create_app
from control_plane.api.keycache import KeyCache
from control_plane.config import ServerSettings
from control_plane.db.engine import Database, ReadWouldWait
from control_plane.db.migrate import upgrade
from control_plane.db.models import ApiKeyRow, ClusterEpochRow, NodeRow
from control_plane.services import sql
from tests.conftest import FakeClock
from tests.control_plane.conftest import ADMIN, Api
from tests.support.nodes import EnrolledNode, enrol_node

BEAT = "POST /v1/nodes/{node_id}/heartbeat"
TTL_S = 5.0


@pytest.fixture
def cache_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cached(
    db: Database, settings: ServerSettings, clock: FakeClock, cache_clock: FakeClock
) -> Iterator[Api]:
    """The app as served, its key cache on a clock of its own."""
    app = create_app(settings, db=db, clock=clock, key_cache_ttl_s=TTL_S)
    app.state.key_cache = KeyCache(ttl_s=TTL_S, clock=cache_clock)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Api(http=http, clock=clock)


def served(api: Api, path: str) -> float:
    value = api.http.app.state.metrics.get_sample_value(  # type: ignore[attr-defined]
        "jitgpu_hot_route_requests_total", {"route": BEAT, "path": path}
    )
    return value or 0.0


def registered(api: Api, name: str, gpus: int = 2) -> EnrolledNode:
    node = enrol_node(api.http, name, ADMIN)
    body = {
        "name": name,
        "gpus": [
            {"uuid": f"GPU-{name}-{i}", "model": "A100", "memory_mb": 1, "index": i}
            for i in range(gpus)
        ],
    }
    assert api.http.post("/v1/nodes", json=body, headers=node.headers).status_code == 201
    return node


def beat(api: Api, node: EnrolledNode, body: dict, *, q: str = "", headers=None):  # type: ignore[no-untyped-def]
    return api.http.post(
        f"/v1/nodes/{node.node_id}/heartbeat{q}", json=body, headers=headers or node.headers
    )


def telemetry(name: str, *, healthy: bool = True, util: float = 41.5) -> dict:
    return {
        "gpus": [
            {"uuid": f"GPU-{name}-0", "healthy": healthy, "utilization_pct": util},
            {"uuid": f"GPU-{name}-1", "memory_used_mb": 1024},
        ],
        "host": {"cpu_pct": 12.5},
    }


@pytest.mark.parametrize("path", ["hot", "framework"])
def test_heartbeats_answer_alike_on_both_paths(cached: Api, path: str) -> None:
    api = cached
    q = "" if path == "hot" else "?via=framework"
    n1 = registered(api, "n1")
    _, a = api.tenant("team-a", quota=2)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1, "command": ["true"]}, headers=a)
    assert alloc.status_code == 201
    before = served(api, path)

    # The ordinary heartbeat: the desired state comes back, the telemetry is kept (a flush
    # never moves the time a node was last heard from backwards, so the clock moves on).
    api.clock.advance(1)
    reply = beat(api, n1, telemetry("n1"), q=q)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["node_id"] == n1.node_id and body["status"] == "online"
    assert [x["id"] for x in body["assignments"]] == [alloc.json()["id"]]
    assert body["epoch"] >= 1 and body["rotate_credential"] is False
    api.http.app.state.heartbeats.flush(api.writer)  # type: ignore[attr-defined]
    shown = api.http.get(f"/v1/nodes/{n1.node_id}", headers=ADMIN).json()
    assert shown["host"] == {"cpu_pct": 12.5}
    by_uuid = {g["uuid"]: g for g in shown["gpus"]}
    assert by_uuid["GPU-n1-0"]["telemetry"]["utilization_pct"] == 41.5
    assert by_uuid["GPU-n1-1"]["telemetry"]["memory_used_mb"] == 1024

    # A heartbeat that changes state (a GPU gone bad) is written at once, on either path.
    sick = beat(api, n1, telemetry("n1", healthy=False), q=q)
    assert sick.status_code == 200, sick.text
    shown = api.http.get(f"/v1/nodes/{n1.node_id}", headers=ADMIN).json()
    assert {g["uuid"]: g["healthy"] for g in shown["gpus"]} == {
        "GPU-n1-0": False,
        "GPU-n1-1": True,
    }
    assert served(api, path) - before == 2


def test_what_is_not_ordinary_gets_the_routes_answer(cached: Api) -> None:
    api = cached
    n1, n2 = registered(api, "n1"), registered(api, "n2")
    # Each key's first request (an enrolment empties the cache) goes through the route,
    # which caches it.
    assert beat(api, n1, telemetry("n1")).status_code == 200
    assert beat(api, n2, telemetry("n2")).status_code == 200
    assert api.http.get("/v1/nodes", headers=ADMIN).status_code == 200
    hot = served(api, "hot")

    # Another node's credential: 403 naming why, whatever the body.
    wrong = beat(api, n2, telemetry("n2"), headers=n1.headers)
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "wrong_node"
    # A body that does not validate: 422 naming the field (true is not an integer).
    bad = telemetry("n1")
    bad["gpus"][1]["memory_used_mb"] = True
    refused = beat(api, n1, bad)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"].endswith("memory_used_mb")
    assert served(api, "hot") == hot
    # A node that does not exist, asked by the admin: the hot path's own 404.
    gone = api.http.post(
        f"/v1/nodes/{n1.node_id[:-4]}0000/heartbeat", json=telemetry("n1"), headers=ADMIN
    )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert beat(api, n1, telemetry("n1")).status_code == 200
    assert served(api, "hot") == hot + 2


def test_a_stale_key_is_checked_again_and_a_revoked_one_refused(
    cached: Api, cache_clock: FakeClock, db: Database
) -> None:
    api = cached
    n1, n2 = registered(api, "n1"), registered(api, "n2")
    for node in (n1, n2):
        assert beat(api, node, telemetry(node.name)).status_code == 200  # caches the key
    hot = served(api, "hot")

    # Past the cache's freshness, a heartbeat is still served here: its key is looked at
    # again, found good, and fresh in the cache again.
    cache_clock.advance(TTL_S + 1)
    assert beat(api, n1, telemetry("n1")).status_code == 200
    assert served(api, "hot") == hot + 1
    cache = api.http.app.state.key_cache  # type: ignore[attr-defined]
    assert cache.lookup(n1.credential) is not None and cache.lookup(n1.credential)[1] is True
    assert cache.lookup(n2.credential)[1] is False

    # Another replica revokes n2's key (this replica's cache is not told). Within the cache's
    # freshness it would still pass; once its entry is stale, it is refused, by the route.
    with db.write() as session:
        session.execute(
            update(ApiKeyRow)
            .where(ApiKeyRow.node_id == n2.node_id, ApiKeyRow.revoked_at.is_(None))  # type: ignore[union-attr]
            .values(revoked_at=api.clock.now)
        )
    refused = beat(api, n2, telemetry("n2"))
    assert refused.status_code == 401, refused.text
    assert cache.lookup(n2.credential) is None
    assert served(api, "hot") == hot + 1
    assert beat(api, n1, telemetry("n1")).status_code == 200


@pytest.mark.parametrize("how", ["loop_read", "loop_read_raw"])
def test_a_read_on_the_loop_never_waits_on_a_busy_file(tmp_path: Path, how: str) -> None:
    """A file another process holds (exclusive locking mode, mid-write): the loop's read is
    refused at once, not put to sleep, and works again once the file is free."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    migrated = Database(url)
    upgrade(migrated)
    migrated.dispose()
    other = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
    other.execute("PRAGMA locking_mode=EXCLUSIVE")
    other.execute("BEGIN EXCLUSIVE")
    other.execute("UPDATE cluster_epoch SET value = value + 1")
    db = Database(url)
    try:
        assert db.loop_reads
        with pytest.raises(ReadWouldWait), getattr(db, how)() as session:
            sql.run(session, sql.READ_EPOCH).fetchone()
        other.execute("COMMIT")
        other.close()
        with getattr(db, how)() as session:
            assert sql.run(session, sql.READ_EPOCH).fetchone() == (1,)
    finally:
        db.dispose()


def test_a_raw_read_on_the_loop_sees_each_commit_and_refuses_the_orm(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'raw.db'}")
    upgrade(db)
    try:
        for expected in (0, 1, 2):
            # Each read is its own transaction: it sees what committed before it began.
            with db.loop_read_raw() as session:
                assert sql.run(session, sql.READ_EPOCH).fetchone() == (expected,)
            with db.write() as session:
                sql.run(session, sql.BUMP_EPOCH).fetchone()
        # Prebuilt statements only: the ORM would read outside the transaction, so it fails.
        with pytest.raises(OperationalError), db.loop_read_raw() as session:
            session.get(ClusterEpochRow, 1)
        with db.loop_read_raw() as session:  # and the next read goes on as before
            assert sql.run(session, sql.READ_EPOCH).fetchone() == (3,)
    finally:
        db.dispose()


def test_no_reads_on_the_loop_against_a_server_database(db: Database) -> None:
    # PostgreSQL is a network trip away: its reads stay on worker threads.
    assert db.loop_reads is db.is_sqlite


def test_telemetry_written_in_the_earlier_form_still_shows(cached: Api, db: Database) -> None:
    # Before heartbeats were stored as pydantic writes them, GPUs were a dict by uuid.
    api = cached
    n1 = registered(api, "n1")
    earlier = '{"host": {"cpu_pct": 3.0}, "gpus": {"GPU-n1-0": {"utilization_pct": 7.0}}}'
    with db.write() as session:
        session.execute(
            update(NodeRow).where(NodeRow.id == n1.node_id).values(telemetry_json=earlier)  # type: ignore[arg-type]
        )
    shown = api.http.get(f"/v1/nodes/{n1.node_id}", headers=ADMIN).json()
    assert shown["host"] == {"cpu_pct": 3.0}
    assert [g["telemetry"] for g in shown["gpus"]] == [{"utilization_pct": 7.0}, {}]


def test_a_busy_nodes_reply_is_the_same_on_both_paths(cached: Api) -> None:
    """A node with a hold and a two-GPU allocation with a command: the hot path's one read
    (on PostgreSQL, one folded statement) answers exactly what the framework's route does,
    assignments and their GPUs in the order they were assigned."""
    api = cached
    n1 = registered(api, "n1", gpus=4)
    _, a = api.tenant("team-a", quota=4)
    hold = api.http.post(
        "/v1/holds", json={"gpu_count": 1, "ttl_s": 600, "warmup": "cuda"}, headers=a
    )
    assert hold.status_code == 201, hold.text
    body = {"gpu_count": 2, "command": ["python", "train.py"], "lease_s": 900, "use_holds": False}
    alloc = api.http.post("/v1/allocations", json=body, headers=a)
    assert alloc.status_code == 201, alloc.text
    api.clock.advance(1)
    hot = beat(api, n1, telemetry("n1"))
    framework = beat(api, n1, telemetry("n1"), q="?via=framework")
    again = beat(api, n1, telemetry("n1"))
    assert hot.status_code == framework.status_code == again.status_code == 200
    assert hot.json() == framework.json() == again.json()
    kinds = {x["kind"]: x for x in hot.json()["assignments"]}
    assert kinds["hold"]["id"] == hold.json()["id"]
    assert kinds["allocation"]["id"] == alloc.json()["id"]
    assert len(kinds["allocation"]["gpu_uuids"]) == 2
