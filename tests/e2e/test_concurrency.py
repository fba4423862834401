"""20 client threads allocate and release against one real server; the database stays true."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from sqlmodel import select

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, AssignmentRow
from tests.conftest import ADMIN_TOKEN
from tests.support.procs import ServerProc

pytestmark = pytest.mark.e2e

THREADS = 20
# A fixed amount of work per thread, not a time window: on a loaded machine a window lets too
# few requests through to test anything, while a count always tests the same contention.
ROUNDS = 12


def _setup(server: ServerProc) -> list[dict]:
    with server.admin() as admin:
        for n in range(2):
            body = {
                "name": f"n{n}",
                "gpus": [
                    {"uuid": f"GPU-{n}-{i}", "model": "A100", "memory_mb": 1} for i in range(8)
                ],
            }
            assert admin.post("/v1/nodes", json=body).status_code == 201
        headers = []
        for t in range(4):
            tenant = admin.post("/v1/tenants", json={"name": f"t{t}", "quota_gpus": 6}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            headers.append({"Authorization": f"Bearer {key}"})
    return headers


def _worker(
    url: str, headers: dict, seed: int, start: threading.Barrier, acked: list, errors: list
) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        start.wait()  # every thread begins together, so that their requests really overlap
        for n in range(1, ROUNDS + 1):
            try:
                r = http.post("/v1/allocations", json={"gpu_count": 1 + (seed + n) % 3})
                if r.status_code in (201, 202):
                    acked.append(r.json())
                    d = http.delete(f"/v1/allocations/{r.json()['id']}")
                    if d.status_code != 200:
                        errors.append((d.status_code, d.text))
                elif r.status_code != 429:
                    errors.append((r.status_code, r.text))
            except httpx.HTTPError as exc:  # a transport error is a failure of the server
                errors.append((0, repr(exc)))


def _hammer(server: ServerProc, headers: list[dict]) -> tuple[list, list]:
    acked: list = []
    errors: list = []
    start = threading.Barrier(THREADS)
    threads = [
        threading.Thread(
            target=_worker, args=(server.url, headers[i % len(headers)], i, start, acked, errors)
        )
        for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return acked, errors


def _check_database(url: str, acked: list) -> None:
    db = Database(url)
    try:
        with db.read() as session:
            rows = session.exec(select(AssignmentRow)).all()
            allocs = {a.id: a for a in session.exec(select(AllocationRow)).all()}
    finally:
        db.dispose()
    per_gpu: dict[str, list[AssignmentRow]] = defaultdict(list)
    for row in rows:
        per_gpu[row.gpu_uuid].append(row)
    for gpu, spans in per_gpu.items():
        spans.sort(key=lambda r: (r.started_at, r.id))
        for before, after in itertools.pairwise(spans):
            assert before.ended_at is not None, f"{gpu}: two assignments open at once"
            assert before.ended_at <= after.started_at, f"{gpu} assigned twice at once"
    for answer in acked:
        row = allocs.get(answer["id"])
        assert row is not None, f"acknowledged {answer['id']} is not in the database"
        if answer["status"] == "allocated":
            assert row.allocated_at is not None
            assert len([r for r in rows if r.allocation_id == row.id]) == row.gpu_count


def test_twenty_threads_never_double_assign(empty_db_url: str, tmp_path: Path) -> None:
    url = empty_db_url
    server = ServerProc(tmp_path, database_url=url, admin_token=ADMIN_TOKEN).start()
    try:
        server.wait_ready()
        acked, errors = _hammer(server, _setup(server))
    finally:
        server.stop()
    assert errors == [], errors[:5]
    assert len(acked) > 50, "too few requests got through to test anything"
    _check_database(url, acked)
