"""Decayed usage charged in SQL, on both databases, equals the fair-share core's own sums."""

from __future__ import annotations

import pytest

from control_plane.db.engine import Database
from control_plane.db.models import TenantRow
from control_plane.scheduling.fairshare import DecayedUsage
from control_plane.services import lifecycle

DAY = 86400.0


def _usage(db: Database) -> DecayedUsage:
    with db.read() as session:
        row = session.get(TenantRow, "t1")
        assert row is not None
        return DecayedUsage(row.usage_gpu_s, row.usage_at)


def test_charges_decay_and_add_as_the_core_computes(db: Database) -> None:
    with db.write() as session:
        session.add(TenantRow(id="t1", name="t1", quota_gpus=8, created_at=0.0))
    expected = DecayedUsage()
    # From nothing; a week later (one half-life); the same instant; a clock that went back
    # (the charge adds, nothing decays, `at` stays); fractions of a day.
    for gpu_s, now in [
        (3600.0, 1000.0),
        (100.0, 1000.0 + 7 * DAY),
        (5.0, 1000.0 + 7 * DAY),
        (50.0, 500.0),
        (0.25, 1000.0 + 7.3 * DAY),
        (7200.0, 1000.0 + 30 * DAY),
    ]:
        with db.write() as session:
            lifecycle.charge_usage(session, "t1", gpu_s, now)
        expected = expected.charge(gpu_s, now)
        got = _usage(db)
        assert got.at == expected.at
        assert got.value == pytest.approx(expected.value, rel=1e-12)


def test_nothing_charged_for_no_work(db: Database) -> None:
    with db.write() as session:
        session.add(TenantRow(id="t1", name="t1", quota_gpus=8, created_at=0.0))
    with db.write() as session:
        lifecycle.charge_usage(session, "t1", 0.0, 5000.0)
    assert _usage(db) == DecayedUsage(0.0, 0.0)
