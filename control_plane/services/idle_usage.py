"""A tenant's realised idle over a sliding window, summed in SQL from its holds and allocations."""

from __future__ import annotations

from sqlalchemy import (
    ColumnElement,
    Float,
    Select,
    Table,
    bindparam,
    case,
    func,
    or_,
    select,
    union_all,
)
from sqlmodel import Session

from control_plane.db.models import AllocationRow, HoldRow
from control_plane.scheduling.idle_budget import IDLE_BUDGET_WINDOW_S, IdleUsage
from control_plane.schemas.enums import HoldStatus
from control_plane.services import sql

HOLD: Table = HoldRow.__table__  # type: ignore[attr-defined]
ALLOC: Table = AllocationRow.__table__  # type: ignore[attr-defined]
_NOW = bindparam("now", type_=Float)
_LO = bindparam("lo", type_=Float)


def _later(a: ColumnElement[float], b: ColumnElement[float]) -> ColumnElement[float]:
    # CASE, not greatest()/max(): the same SQL on SQLite and PostgreSQL.
    return case((a > b, a), else_=b)


def _end(ended: ColumnElement[float | None]) -> ColumnElement[float]:
    """Where a span ends for the window: at `ended`, or now while it lasts (or ended later)."""
    return case((or_(ended.is_(None), ended > _NOW), _NOW), else_=ended)


def _gpu_seconds(
    start: ColumnElement[float], end: ColumnElement[float], gpus: ColumnElement[int]
) -> ColumnElement[float]:
    """The GPU-seconds of [start, end] inside [lo, now] (end is at most now already)."""
    begin = _later(start, _LO)
    return case((end > begin, (end - begin) * gpus), else_=0.0)


def _hold_idle() -> ColumnElement[float]:
    """A hold's idle in the window: from placement to its end; a claimed hold's own warm-up
    is taken off the end (a job started without it would have waited for that anyway)."""
    end = _end(HOLD.c.ended_at)
    warmup = case((HOLD.c.warmup_s > 0, HOLD.c.warmup_s), else_=0.0)
    claimed_end = _later(HOLD.c.placed_at, end - warmup)
    end = case((HOLD.c.status == HoldStatus.CLAIMED.value, claimed_end), else_=end)
    return _gpu_seconds(HOLD.c.placed_at, end, HOLD.c.gpu_count)


def _busy() -> ColumnElement[float]:
    return _gpu_seconds(ALLOC.c.allocated_at, _end(ALLOC.c.released_at), ALLOC.c.gpu_count)


def _window_sum(
    table: Table,
    started: ColumnElement[float | None],
    ended: ColumnElement[float | None],
    value: ColumnElement[float],
) -> Select[tuple[float]]:
    """SUM(value) over the tenant's rows that started and still run, or ended in the window:
    two index ranges of (tenant, end) rather than every row of the tenant."""
    tenant = table.c.tenant_id == bindparam("tenant")
    running = select(value.label("v")).where(tenant, started.is_not(None), ended.is_(None))
    recent = select(value.label("v")).where(tenant, started.is_not(None), ended >= _LO)
    both = union_all(running, recent).subquery()
    return select(func.coalesce(func.sum(both.c.v), 0.0))


IDLE_SUM = _window_sum(HOLD, HOLD.c.placed_at, HOLD.c.ended_at, _hold_idle())
BUSY_SUM = _window_sum(ALLOC, ALLOC.c.allocated_at, ALLOC.c.released_at, _busy())


def tenant_idle_usage(
    session: Session, tenant_id: str, now: float, *, window_s: float = IDLE_BUDGET_WINDOW_S
) -> IdleUsage:
    """The same sums as `scheduling.idle_budget.realised_idle`, computed by the database:
    nothing per row comes back, however many jobs the tenant ran in the window."""
    if not window_s > 0:
        raise ValueError("window_s must be positive")
    params = {"tenant": tenant_id, "now": now, "lo": now - window_s}
    # Prebuilt reads on the cursor (one round trip on PostgreSQL): inside a writer's batch
    # they count as no change, so a hold refused here fails alone, not its whole batch.
    (_, idle), (_, busy) = sql.run_together(session, [(IDLE_SUM, params), (BUSY_SUM, params)])
    return IdleUsage(window_s=window_s, idle_gpu_s=float(idle[0][0]), busy_gpu_s=float(busy[0][0]))
