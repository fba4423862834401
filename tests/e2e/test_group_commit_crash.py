"""A server killed (-9) while its writer commits batches of keyed allocations: after a restart,
every request retried with its Idempotency-Key is answered as before if it was acknowledged,
and applied exactly once either way."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import httpx
import pytest
from sqlmodel import col, select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, IdempotencyRow
from tests.conftest import ADMIN_TOKEN
from tests.e2e.test_concurrency import _check_database
from tests.e2e.test_faults import _tenant
from tests.support.procs import ServerProc, wait_for

pytestmark = pytest.mark.e2e

BODY = {"gpu_count": 1, "use_holds": False}


def _keyed_load(
    url: str, headers: dict, stop: threading.Event, sent: list, acked: dict, lock: threading.Lock
) -> None:
    """Allocate with a fresh key (noted before it is sent) and release, until the server dies."""
    with httpx.Client(base_url=url, headers=headers, timeout=5) as http:
        while not stop.is_set():
            key = uuid.uuid4().hex
            with lock:
                sent.append(key)
            try:
                r = http.post("/v1/allocations", json=BODY, headers={"Idempotency-Key": key})
                if r.status_code in (201, 202):
                    with lock:
                        acked[key] = r.json()
                    http.delete(f"/v1/allocations/{r.json()['id']}")
            except httpx.HTTPError:
                return  # the server is gone


def test_killed_mid_batch_loses_no_acknowledged_request_and_applies_none_twice(
    empty_db_url: str, tmp_path: Path
) -> None:
    url = empty_db_url
    server = ServerProc(tmp_path, database_url=url, admin_token=ADMIN_TOKEN).start()
    server.wait_ready()
    headers = _tenant(server, gpus=32)
    sent: list[str] = []
    acked: dict[str, dict] = {}
    stop, lock = threading.Event(), threading.Lock()
    threads = [
        threading.Thread(target=_keyed_load, args=(server.url, headers, stop, sent, acked, lock))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    # Eight clients at once: the writer commits their requests in shared batches.
    wait_for(lambda: len(acked) >= 100, timeout=60, what="acknowledged allocations")
    server.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    restarted = ServerProc(
        tmp_path, database_url=url, admin_token=ADMIN_TOKEN, port=server.port, name="server2"
    ).start()
    retried: dict[str, dict] = {}
    try:
        restarted.wait_ready()
        with httpx.Client(base_url=restarted.url, headers=headers, timeout=10) as http:
            for key in sent:
                r = http.post("/v1/allocations", json=BODY, headers={"Idempotency-Key": key})
                assert r.status_code in (201, 202), r.text
                retried[key] = r.json()
    finally:
        restarted.stop()
    # Acknowledged before the kill: the retry gets the stored answer, the same allocation.
    for key, answer in acked.items():
        assert retried[key]["id"] == answer["id"], f"acknowledged request {key} was lost"
    db = Database(url)
    try:
        with db.read() as session:
            rows = session.exec(select(AllocationRow)).all()
            keys = session.exec(
                select(IdempotencyRow.key).where(col(IdempotencyRow.key).in_(sent))
            ).all()
    finally:
        db.dispose()
    # Each request applied exactly once: one allocation per key, each the one its key names.
    assert sorted(keys) == sorted(sent)
    assert len(rows) == len(sent)
    assert {r.id for r in rows} == {a["id"] for a in retried.values()}
    _check_database(url, list(acked.values()))
