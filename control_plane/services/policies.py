"""Per-tenant pre-warm policy on the server: the speculative budget each hold is checked on."""

from __future__ import annotations

import json

from sqlmodel import Session

from control_plane.db.engine import Database
from control_plane.db.models import TenantRow
from control_plane.schemas.tenants import TenantPolicy, TenantPolicyInfo
from control_plane.services.auth import ensure_tenant
from control_plane.services.holds import held_gpus, idle_gpu_hours_today
from control_plane.services.idle_usage import tenant_idle_usage


def _info(session: Session, row: TenantRow, now: float) -> TenantPolicyInfo:
    usage = tenant_idle_usage(session, row.id, now)
    ratio = usage.ratio
    return TenantPolicyInfo(
        tenant_id=row.id,
        max_held_gpus=row.max_held_gpus,
        max_idle_gpu_hours_per_day=row.max_idle_gpu_hours_per_day,
        max_hold_ttl_s=row.max_hold_ttl_s,
        allowed_warmups=json.loads(row.allowed_warmups) if row.allowed_warmups else None,
        holds_may_preempt_holds=row.holds_may_preempt_holds,
        idle_budget=row.idle_budget,
        held_gpus=held_gpus(session, row.id),
        idle_gpu_hours_today=round(idle_gpu_hours_today(session, row.id, now), 6),
        idle_ratio=None if ratio is None else round(ratio, 6),
        idle_window_s=usage.window_s,
        idle_window_gpu_hours=round(usage.idle_gpu_s / 3600, 6),
        busy_window_gpu_hours=round(usage.busy_gpu_s / 3600, 6),
        over_idle_budget=row.idle_budget is not None and usage.over(row.idle_budget),
    )


def get_policy(db: Database, *, tenant_id: str, now: float) -> TenantPolicyInfo:
    with db.read() as session:
        return _info(session, ensure_tenant(session, tenant_id), now)


def put_policy(db: Database, *, tenant_id: str, body: TenantPolicy, now: float) -> TenantPolicyInfo:
    with db.write() as session:
        row = ensure_tenant(session, tenant_id)
        row.max_held_gpus = body.max_held_gpus
        row.max_idle_gpu_hours_per_day = body.max_idle_gpu_hours_per_day
        row.max_hold_ttl_s = body.max_hold_ttl_s
        row.allowed_warmups = (
            None if body.allowed_warmups is None else json.dumps(body.allowed_warmups)
        )
        row.holds_may_preempt_holds = body.holds_may_preempt_holds
        row.idle_budget = body.idle_budget
        session.flush()
        return _info(session, row, now)
