"""The idle budget's window summed by the database equals the pure definition, on both
databases, and reads as no change inside a writer's batch."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import insert

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, HoldRow, TenantRow
from control_plane.db.session import TxSession
from control_plane.scheduling.idle_budget import HoldSpan, UseSpan, realised_idle
from control_plane.services.idle_usage import tenant_idle_usage

NOW = 1_000_000.0
WINDOW = 86_400.0


def _spans(rng: random.Random) -> tuple[list[dict], list[dict], list[HoldSpan], list[UseSpan]]:
    """Holds and allocations of tenant t1 around the window's edges (placed before it, ended
    before it, still running, claimed after a warm-up longer than the span), and the same
    as the pure function's spans."""
    holds, allocs, hold_spans, use_spans = [], [], [], []
    statuses = ("claimed", "expired", "cancelled", "ready", "warming")
    for i in range(300):
        placed = NOW - rng.uniform(0, 2 * WINDOW)
        running = rng.random() < 0.2
        ended = None if running else min(NOW, placed + rng.uniform(0, 6 * 3600))
        status = "ready" if running else rng.choice(statuses[:3])
        warmup = rng.choice([None, 0.0, rng.uniform(0, 600), 10 * 3600.0])
        gpus = rng.randint(1, 8)
        holds.append(
            {
                "id": f"h{i}",
                "tenant_id": "t1",
                "status": status,
                "gpu_count": gpus,
                "start_at": placed,
                "ttl_s": 600,
                "lead_s": 120,
                "expires_at": placed + 600,
                "confidence": 0.5,
                "source": "test",
                "strategy": "pack",
                "created_at": placed,
                "placed_at": placed,
                "warmup_s": warmup,
                "ended_at": ended,
            }
        )
        hold_spans.append(
            HoldSpan(placed, ended, gpus, claimed=status == "claimed", warmup_s=warmup or 0.0)
        )
        start = NOW - rng.uniform(0, 2 * WINDOW)
        released = None if rng.random() < 0.2 else min(NOW, start + rng.uniform(0, 8 * 3600))
        allocs.append(
            {
                "id": f"a{i}",
                "tenant_id": "t1",
                "status": "allocated" if released is None else "released",
                "gpu_count": gpus,
                "requested_at": start,
                "allocated_at": start,
                "released_at": released,
                "strategy": "pack",
                "job_class": "batch",
            }
        )
        use_spans.append(UseSpan(start, released, gpus))
    # A hold never placed and an allocation still queued count for nothing; another tenant's
    # rows are not this tenant's.
    holds.append({**holds[0], "id": "unplaced", "placed_at": None, "ended_at": None})
    allocs.append({**allocs[0], "id": "queued", "allocated_at": None, "released_at": None})
    holds.append({**holds[1], "id": "other-h", "tenant_id": "t2"})
    allocs.append({**allocs[1], "id": "other-a", "tenant_id": "t2"})
    return holds, allocs, hold_spans, use_spans


def test_the_database_sums_the_window_as_the_definition_does(db: Database) -> None:
    holds, allocs, hold_spans, use_spans = _spans(random.Random(5))
    with db.write() as session:
        for tenant in ("t1", "t2"):
            session.add(TenantRow(id=tenant, name=tenant, quota_gpus=8, created_at=0.0))
        session.flush()
        session.connection().execute(insert(HoldRow.__table__), holds)
        session.connection().execute(insert(AllocationRow.__table__), allocs)
    expected = realised_idle(hold_spans, use_spans, now=NOW, window_s=WINDOW)
    assert expected.idle_gpu_s > 0 and expected.busy_gpu_s > 0
    with db.read() as session:
        got = tenant_idle_usage(session, "t1", NOW, window_s=WINDOW)
    assert got.idle_gpu_s == pytest.approx(expected.idle_gpu_s, rel=1e-9)
    assert got.busy_gpu_s == pytest.approx(expected.busy_gpu_s, rel=1e-9)
    assert got.window_s == WINDOW
    with db.read() as session:
        nothing = tenant_idle_usage(session, "nobody", NOW)
    assert (nothing.idle_gpu_s, nothing.busy_gpu_s, nothing.ratio) == (0.0, 0.0, None)


def test_the_check_counts_as_no_change_inside_a_writers_batch(db: Database) -> None:
    # A hold refused for its idle budget fails alone: a command that changed nothing is
    # undone without redoing its batch one by one (services/writer.py).
    with db.write() as session:
        session.add(TenantRow(id="t1", name="t1", quota_gpus=8, created_at=0.0))
    with db.write() as session:
        assert isinstance(session, TxSession)
        session.begin_command()  # as the writer does before each command
        tenant_idle_usage(session, "t1", NOW)
        assert session.command_changes == 0


def test_rows_at_the_windows_edges_count_as_the_definition_says(db: Database) -> None:
    """Fixed rows where the two could part: ended exactly at the window's start, ended
    after now, placed after now, a claimed hold whose warm-up is longer than its span."""
    lo = NOW - WINDOW
    base = _spans(random.Random(1))[0][0]
    rows = [
        ("edge", lo - 100, lo, "expired", None),
        ("late", NOW - 50, NOW + 500, "expired", None),
        ("future", NOW + 10, None, "ready", None),
        ("short-claim", NOW - 100, NOW - 40, "claimed", 600.0),
        ("claim", NOW - 1000, NOW - 100, "claimed", 120.0),
    ]
    holds = [
        {
            **base,
            "id": name,
            "placed_at": placed,
            "ended_at": ended,
            "status": status,
            "warmup_s": warmup,
            "gpu_count": 2,
        }
        for name, placed, ended, status, warmup in rows
    ]
    with db.write() as session:
        session.add(TenantRow(id="t1", name="t1", quota_gpus=8, created_at=0.0))
        session.flush()
        session.connection().execute(insert(HoldRow.__table__), holds)
    spans = [
        HoldSpan(placed, ended, 2, claimed=status == "claimed", warmup_s=warmup or 0.0)
        for _, placed, ended, status, warmup in rows
    ]
    expected = realised_idle(spans, [], now=NOW, window_s=WINDOW)
    with db.read() as session:
        got = tenant_idle_usage(session, "t1", NOW, window_s=WINDOW)
    # 50 s of "late" and 780 s of "claim", on 2 GPUs each; the rest count nothing.
    assert expected.idle_gpu_s == 2 * (50 + 780)
    assert got.idle_gpu_s == pytest.approx(expected.idle_gpu_s)
