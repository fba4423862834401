"""Round trips to PostgreSQL per command of a batch, counted on the wire: a placed allocation
and a client's release each wait for the server once; what a batch pays once is apart."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from control_plane.api.app import create_app
from control_plane.api.keycache import KeyCache
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.services.writer import Command, GroupWriter
from tests.conftest import FakeClock
from tests.control_plane.conftest import ADMIN, Api, allocate, release
from tests.support.nodes import enrol_node
from tests.support.pg import TempPostgres


class TripCounter:
    """A TCP proxy in front of the database that counts round trips: each time the client
    sends after the server last spoke (or first)."""

    def __init__(self, target_port: int) -> None:
        self.trips = 0
        self._target = target_port
        self._listen = socket.socket()
        self._listen.bind(("127.0.0.1", 0))
        self._listen.listen(64)
        self.port = self._listen.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        client_last = False
        with client, server:
            while True:
                ready, _, _ = select.select([client, server], [], [])
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        if not client_last:
                            self.trips += 1
                        client_last = True
                        server.sendall(data)
                    else:
                        client_last = False
                        client.sendall(data)

    def close(self) -> None:
        self._listen.close()


@pytest.fixture
def counter(pg_server: TempPostgres | None) -> Iterator[TripCounter]:
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    proxy = TripCounter(pg_server.port)
    yield proxy
    proxy.close()


@pytest.fixture
def db_url(pg_server: TempPostgres | None, counter: TripCounter) -> Iterator[str]:
    assert pg_server is not None
    name = pg_server.create_database(template=pg_server.template)  # type: ignore[attr-defined]
    try:
        yield pg_server.url(name).replace(f":{pg_server.port}/", f":{counter.port}/")
    finally:
        pg_server.drop_database(name)


def _trips(counter: TripCounter, writer: GroupWriter, commands: list[Command]) -> int:
    before = counter.trips
    writer.apply_batch(commands)
    for command in commands:
        assert command.answer.result()[0] in (200, 201)
    return counter.trips - before


def test_a_placed_allocation_and_a_release_each_wait_once(api: Api, counter: TripCounter) -> None:
    api.node("n1", gpus=16)
    tenant_id, _ = api.tenant(quota=16)
    writer = api.writer

    def allocate_n(n: int) -> tuple[int, list[str]]:
        batch = [Command(use_case=allocate(tenant_id)) for _ in range(n)]
        trips = _trips(counter, writer, batch)
        return trips, [c.answer.result()[1].split('"id":"')[1].split('"')[0] for c in batch]

    def release_all(ids: list[str]) -> int:
        return _trips(counter, writer, [Command(use_case=release(tenant_id, i)) for i in ids])

    # Past psycopg's prepare threshold (a statement is prepared on its fifth use, which may
    # cost a round trip of its own) and with the placement view built.
    for _ in range(2):
        release_all(allocate_n(4)[1])
    one, first = allocate_n(1)
    four, more = allocate_n(4)
    # A placed allocation's inserts go with the next statement. Its tenant's admission is
    # read by the batch's first allocation of that tenant only: the three after it reuse it,
    # with the GPUs placed before them counted in (`BatchAdmissions`).
    assert four == one
    # What a batch pays once: BEGIN travels with the placement lock and the epoch read, and
    # COMMIT with the epoch's bump and the last command's writes.
    assert one == 2 + 1
    one_release, four_releases = release_all(first), release_all(more)
    # Each release: the allocation, its GPUs and the queue's tenants in one round trip.
    assert four_releases - one_release == 3
    assert one_release == 2 + 1


def test_each_tenant_of_a_batch_is_read_once_and_a_release_keeps_the_reads(
    api: Api, counter: TripCounter
) -> None:
    api.node("n1", gpus=16)
    first, _ = api.tenant("team-a", quota=8)
    second, _ = api.tenant("team-b", quota=8)
    writer = api.writer
    for _ in range(2):  # past psycopg's prepare threshold, as above
        batch = [Command(use_case=allocate(t)) for t in (first, second) for _ in range(3)]
        _trips(counter, writer, batch)
        ids = [
            (t, c.answer.result()[1].split('"id":"')[1].split('"')[0])
            for t, c in zip([first] * 3 + [second] * 3, batch, strict=True)
        ]
        _trips(counter, writer, [Command(use_case=release(t, i)) for t, i in ids])
    # Two tenants, three allocations each: one admission read per tenant.
    two_tenants = _trips(
        counter, writer, [Command(use_case=allocate(t)) for t in (first, second) for _ in range(3)]
    )
    assert two_tenants == 2 + 2
    # An allocation, a release that serves nobody from the queue, an allocation: the second
    # allocation reuses the first's read (the release took its GPU off), so the batch waits
    # for the first read and the release only.
    alloc = Command(use_case=allocate(first))
    _trips(counter, writer, [alloc])
    alloc_id = alloc.answer.result()[1].split('"id":"')[1].split('"')[0]
    mixed = [
        Command(use_case=allocate(first)),
        Command(use_case=release(first, alloc_id)),
        Command(use_case=allocate(first)),
    ]
    assert _trips(counter, writer, mixed) == 2 + 2


def test_a_nodes_common_heartbeat_waits_once(
    db: Database, settings: ServerSettings, clock: FakeClock, counter: TripCounter
) -> None:
    """The node's state and GPUs' health, its desired state, the epoch and, for a stale cache
    entry, its key's second look: one round trip (one statement). One statement per read, with
    BEGIN and COMMIT, from a worker thread, it was about ten."""
    slow_flush = settings.model_copy(update={"heartbeat_flush_s": 60.0})  # no flush meanwhile
    app = create_app(slow_flush, db=db, clock=clock)
    cache_clock = FakeClock()
    app.state.key_cache = KeyCache(ttl_s=5.0, clock=cache_clock)
    with TestClient(app, raise_server_exceptions=False) as http:
        api = Api(http=http, clock=clock)
        node = enrol_node(http, "n1", ADMIN)
        gpus = [
            {"uuid": f"GPU-n1-{i}", "model": "A100", "memory_mb": 1, "index": i} for i in (0, 1)
        ]
        r = http.post("/v1/nodes", json={"name": "n1", "gpus": gpus}, headers=node.headers)
        assert r.status_code == 201
        _, key = api.tenant(quota=1)
        assert http.post("/v1/allocations", json={"gpu_count": 1}, headers=key).status_code == 201
        body = {"gpus": [{"uuid": "GPU-n1-0", "healthy": True, "utilization_pct": 50.0}]}
        path = f"/v1/nodes/{node.node_id}/heartbeat"

        def trips(stale: bool) -> tuple[int, list]:
            before, replies = counter.trips, []
            for _ in range(5):
                if stale:
                    cache_clock.advance(6.0)
                replies.append(http.post(path, json=body, headers=node.headers))
            return counter.trips - before, replies

        # Past psycopg's prepare threshold (it prepares a statement at its sixth run on a
        # connection, in a round trip of its own, once), and every pooled connection used just
        # now (one idle for a second is pinged first, a round trip of its own).
        for stale in (False, True, False, True):
            trips(stale)
        for stale in (False, True):
            count, replies = trips(stale)
            assert [r.status_code for r in replies] == [200] * 5
            assert [len(r.json()["assignments"]) for r in replies] == [1] * 5
            assert count == 5, (stale, count)
