"""A tenant's realised idle over a sliding window, read from its holds and allocations."""

from __future__ import annotations

from sqlmodel import Session, col, or_, select

from control_plane.db.models import AllocationRow, HoldRow
from control_plane.scheduling.idle_budget import (
    IDLE_BUDGET_WINDOW_S,
    HoldSpan,
    IdleUsage,
    UseSpan,
    realised_idle,
)
from control_plane.schemas.enums import HoldStatus


def tenant_idle_usage(
    session: Session, tenant_id: str, now: float, *, window_s: float = IDLE_BUDGET_WINDOW_S
) -> IdleUsage:
    lo = now - window_s
    holds = session.exec(
        select(HoldRow).where(
            HoldRow.tenant_id == tenant_id,
            col(HoldRow.placed_at).is_not(None),
            or_(col(HoldRow.ended_at).is_(None), col(HoldRow.ended_at) >= lo),
        )
    ).all()
    allocs = session.exec(
        select(AllocationRow).where(
            AllocationRow.tenant_id == tenant_id,
            col(AllocationRow.allocated_at).is_not(None),
            or_(col(AllocationRow.released_at).is_(None), col(AllocationRow.released_at) >= lo),
        )
    ).all()
    spans = [
        HoldSpan(
            placed_at=float(h.placed_at or 0.0),
            ended_at=h.ended_at,
            gpu_count=h.gpu_count,
            claimed=h.status == HoldStatus.CLAIMED.value,
            warmup_s=h.warmup_s or 0.0,
        )
        for h in holds
    ]
    uses = [
        UseSpan(
            allocated_at=float(a.allocated_at or 0.0),
            released_at=a.released_at,
            gpu_count=a.gpu_count,
        )
        for a in allocs
    ]
    return realised_idle(spans, uses, now=now, window_s=window_s)
