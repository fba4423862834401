"""Speculative holds: create within the tenant's budget, place at start_at - lead, warm, cancel."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import func
from sqlmodel import Session, col, select

from control_plane.db.models import AllocationRow, HoldRow, TenantRow
from control_plane.scheduling.idle_budget import IDLE_BUDGET_EXCEEDED
from control_plane.schemas.allocations import Hold, HoldCreate
from control_plane.schemas.enums import ACTIVE_HOLD_STATUSES, HoldStatus
from control_plane.schemas.nodes import WarmupReport
from control_plane.services import feasible, lifecycle, placing, sql
from control_plane.services.auth import ensure_tenant
from control_plane.services.errors import Forbidden, Invalid, NotFound, QuotaExceeded
from control_plane.services.events import move, note, record
from control_plane.services.idle_usage import tenant_idle_usage
from control_plane.services.ids import new_id
from control_plane.services.views import hold_view

ACTIVE_HOLDS = [s.value for s in ACTIVE_HOLD_STATUSES]
DEFAULT_LEAD_S = 120
MIN_SHORTENED_TTL_S = 60  # a hold shorter than this is unlikely to be claimed: refuse instead


def tenant_hold_or_404(session: Session, *, tenant_id: str | None, hold_id: str) -> HoldRow:
    row = session.get(HoldRow, hold_id)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise NotFound(f"hold {hold_id} not found")
    return row


def held_gpus(session: Session, tenant_id: str) -> int:
    return int(
        session.exec(
            select(func.coalesce(func.sum(HoldRow.gpu_count), 0)).where(
                HoldRow.tenant_id == tenant_id, col(HoldRow.status).in_(sql.consts(ACTIVE_HOLDS))
            )
        ).one()
    )


def idle_gpu_hours_today(session: Session, tenant_id: str, now: float) -> float:
    """Idle held GPU-hours charged since UTC midnight: ended holds plus the ones still held."""
    day = datetime.fromtimestamp(now, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    midnight = day.timestamp()
    ended = session.exec(
        select(func.coalesce(func.sum(HoldRow.idle_gpu_s), 0.0)).where(
            HoldRow.tenant_id == tenant_id, col(HoldRow.ended_at) >= midnight
        )
    ).one()
    running = session.exec(
        select(HoldRow).where(
            HoldRow.tenant_id == tenant_id,
            col(HoldRow.status).in_(sql.consts(placing.PLACED_HOLD_STATUSES)),
        )
    ).all()
    live = sum(lifecycle.hold_idle_gpu_s(h, now) for h in running)
    return (float(ended) + live) / 3600.0


def _check_policy(session: Session, tenant: TenantRow, body: HoldCreate, now: float) -> None:
    """The server's limits win over any agent's local policy; each refusal names its limit."""
    if body.ttl_s > tenant.max_hold_ttl_s:
        raise Forbidden(
            f"ttl_s {body.ttl_s} exceeds this tenant's max_hold_ttl_s {tenant.max_hold_ttl_s}",
            code="policy_max_hold_ttl_s",
            field="ttl_s",
        )
    allowed = json.loads(tenant.allowed_warmups) if tenant.allowed_warmups else None
    if body.warmup is not None and allowed is not None and body.warmup not in allowed:
        raise Forbidden(
            f"warm-up profile {body.warmup!r} is not in this tenant's allowed_warmups {allowed}",
            code="policy_allowed_warmups",
            field="warmup",
        )
    held = held_gpus(session, tenant.id)
    if held + body.gpu_count > tenant.max_held_gpus:
        raise QuotaExceeded(
            f"{held} GPUs held + {body.gpu_count} requested exceeds "
            f"max_held_gpus {tenant.max_held_gpus}",
            code="speculative_budget_exceeded",
            field="gpu_count",
        )
    idle = idle_gpu_hours_today(session, tenant.id, now)
    if idle >= tenant.max_idle_gpu_hours_per_day:
        raise QuotaExceeded(
            f"{idle:.2f} idle GPU-hours held today reached "
            f"max_idle_gpu_hours_per_day {tenant.max_idle_gpu_hours_per_day}",
            code="idle_budget_exhausted",
        )


def _fit_idle_budget(
    session: Session,
    tenant: TenantRow,
    body: HoldCreate,
    *,
    start_at: float,
    lead_s: int,
    now: float,
) -> int:
    """The hold's TTL within the tenant's idle_budget: refused while the realised idle is over
    it, shortened so that the hold, held unclaimed to its end, stays within what is left.
    Only new holds are steered, never allocations or claims (real demand)."""
    if tenant.idle_budget is None:
        return body.ttl_s
    usage = tenant_idle_usage(session, tenant.id, now)
    allowance = usage.allowance_gpu_s(tenant.idle_budget)
    ratio = usage.ratio
    shown = "no allocations" if ratio is None else f"idle ratio {ratio:.4f}"
    said = (
        f"realised idle over the last {usage.window_s / 3600:g} h "
        f"({usage.idle_gpu_s / 3600:.2f} idle GPU-hours, {shown}) against this tenant's "
        f"idle_budget {tenant.idle_budget} (allowing {allowance / 3600:.2f} idle GPU-hours now)"
    )
    if usage.over(tenant.idle_budget):
        raise QuotaExceeded(
            f"{said} is over it; new holds are refused until it falls back, allocations are not",
            code=IDLE_BUDGET_EXCEEDED,
        )
    # Worst case: placed at start - lead (or now) and never claimed until it expires.
    before_start = start_at - max(now, start_at - lead_s)
    fits = int((allowance - usage.idle_gpu_s) / body.gpu_count - before_start)
    if fits >= body.ttl_s:
        return body.ttl_s
    if fits < MIN_SHORTENED_TTL_S:
        raise QuotaExceeded(
            f"{said}: {body.gpu_count} GPUs held from {before_start:.0f} s before their start "
            f"would leave under {MIN_SHORTENED_TTL_S} s of ttl_s; ask for fewer GPUs or a "
            "shorter lead",
            code=IDLE_BUDGET_EXCEEDED,
            field="gpu_count",
        )
    return fits


def create(
    session: Session,
    *,
    tenant_id: str,
    body: HoldCreate,
    now: float,
    default_lead_s: int = DEFAULT_LEAD_S,
) -> tuple[int, Hold]:
    tenant = ensure_tenant(session, tenant_id)
    _check_policy(session, tenant, body, now)
    feasible.check(session, gpu_count=body.gpu_count, gpu_model=body.gpu_model)
    if body.start_at is not None:
        start_at = body.start_at.timestamp()
    else:
        start_at = now + (body.start_in_s or 0.0)
    lead_s = default_lead_s if body.lead_s is None else body.lead_s
    ttl_s = _fit_idle_budget(session, tenant, body, start_at=start_at, lead_s=lead_s, now=now)
    expires_at = start_at + ttl_s
    if expires_at <= now:
        raise Invalid(
            "start_at + ttl_s is already in the past", code="hold_in_past", field="start_at"
        )
    hold = HoldRow(
        id=new_id("hold"),
        tenant_id=tenant_id,
        status=HoldStatus.REQUESTED.value,
        gpu_count=body.gpu_count,
        gpu_model=body.gpu_model,
        start_at=start_at,
        ttl_s=ttl_s,
        lead_s=lead_s,
        expires_at=expires_at,
        confidence=body.confidence,
        source=body.source.value,
        warmup=body.warmup,
        strategy=body.strategy.value,
        label=body.label,
        created_at=now,
    )
    session.add(hold)
    record(
        session,
        kind="hold",
        object_id=hold.id,
        tenant_id=tenant_id,
        to_state=hold.status,
        at=now,
        reason=f"requested by {hold.source}"
        + (
            ""
            if ttl_s == body.ttl_s
            else f"; ttl_s {body.ttl_s} shortened to {ttl_s} by idle_budget"
        ),
    )
    if ttl_s != body.ttl_s:
        hold.reason = f"ttl_s {body.ttl_s} shortened to {ttl_s} to stay within idle_budget"
    session.flush()
    if hold.start_at - hold.lead_s <= now:
        try_place_hold(session, placing.load_cluster(session), hold, tenant, now=now)
    session.flush()
    return 201, hold_view(session, hold)


def try_place_hold(
    session: Session, cluster: placing.Cluster, hold: HoldRow, tenant: TenantRow, *, now: float
) -> bool:
    """Place a requested hold on free GPUs; it may displace weaker holds only if allowed.

    A hold never displaces an allocation: speculation must not block real demand.
    """
    request = placing.request_of(hold.gpu_count, hold.gpu_model, hold.strategy)
    gpus = placing.find_gpus(cluster, request)
    if gpus is None and tenant.holds_may_preempt_holds:
        found = placing.find_gpus_preempting(
            session,
            cluster,
            request,
            max_confidence=hold.confidence,
            exclude_hold=hold.id,
            tenant_id=hold.tenant_id,
        )
        if found is not None:
            gpus, weaker = found
            for other in weaker:
                lifecycle.end_hold(
                    session,
                    other,
                    HoldStatus.PREEMPTED,
                    now=now,
                    reason=f"displaced by more confident hold {hold.id}",
                )
    if gpus is None:
        return False
    lifecycle.assign(session, gpus=gpus, now=now, hold_id=hold.id)
    hold.placed_at = now
    move(session, hold, "hold", HoldStatus.PLACED.value, now=now, reason="placed")
    if hold.warmup is None:
        # Nothing to run on the node: the GPUs are as warm as they will get.
        hold.ready_at = now
        hold.warmup_s = 0.0
        move(session, hold, "hold", HoldStatus.READY.value, now=now, reason="no warm-up profile")
    return True


def get(session: Session, *, tenant_id: str | None, hold_id: str) -> Hold:
    return hold_view(session, tenant_hold_or_404(session, tenant_id=tenant_id, hold_id=hold_id))


def cancel(session: Session, *, tenant_id: str | None, hold_id: str, now: float) -> Hold:
    """Cancel (idempotent: an ended hold answers as it is)."""
    hold = tenant_hold_or_404(session, tenant_id=tenant_id, hold_id=hold_id)
    if hold.status in ACTIVE_HOLDS:
        lifecycle.end_hold(
            session, hold, HoldStatus.CANCELLED, now=now, reason="cancelled by client"
        )
        session.flush()
    return hold_view(session, hold)


def report_warmup(
    session: Session, *, node_id: str, hold_id: str, body: WarmupReport, now: float
) -> Hold:
    """A node says a hold's warm-up started, finished or failed."""
    hold = session.get(HoldRow, hold_id)
    if hold is None or not placing.hold_on_node(session, hold_id, node_id):
        raise NotFound(f"hold {hold_id} not found on node {node_id}")
    claimed = hold.status == HoldStatus.CLAIMED.value
    if body.started:
        if hold.status == HoldStatus.PLACED.value:
            move(session, hold, "hold", HoldStatus.WARMING.value, now=now, reason="warm-up started")
    elif body.ok:
        hold.warmup_s = body.warmup_s
        if hold.status in (HoldStatus.PLACED.value, HoldStatus.WARMING.value):
            hold.ready_at = now
            move(
                session,
                hold,
                "hold",
                HoldStatus.READY.value,
                now=now,
                reason=f"warm in {body.warmup_s:.1f}s",
            )
        elif claimed and hold.allocation_id:
            _mark_allocation_ready(session, hold.allocation_id, now)
    elif hold.status in (HoldStatus.PLACED.value, HoldStatus.WARMING.value):
        hold.warmup_s = body.warmup_s
        tail = (body.output_tail or "")[-400:]
        lifecycle.end_hold(
            session,
            hold,
            HoldStatus.FAILED,
            now=now,
            reason=f"warm-up failed (exit {body.exit_code}): {tail}".strip(),
        )
    elif claimed and hold.allocation_id:
        # The job took the GPUs mid-warm-up; they are usable now, only not warm.
        _mark_allocation_ready(session, hold.allocation_id, now)
    session.flush()
    return hold_view(session, hold)


def _mark_allocation_ready(session: Session, allocation_id: str, now: float) -> None:
    alloc = session.get(AllocationRow, allocation_id)
    if alloc is not None and alloc.ready_at is None:
        alloc.ready_at = now


def replace_hold(
    session: Session,
    cluster: placing.Cluster,
    hold: HoldRow,
    tenant: TenantRow,
    *,
    now: float,
    reason: str,
) -> bool:
    """Move a hold whose GPUs were lost onto other free GPUs; it warms again from scratch."""
    request = placing.request_of(hold.gpu_count, hold.gpu_model, hold.strategy)
    gpus = placing.find_gpus(cluster, request)
    if gpus is None:
        return False
    lifecycle.assign(session, gpus=gpus, now=now, hold_id=hold.id)
    hold.ready_at = None
    if hold.status == HoldStatus.PLACED.value:
        # Lost before its warm-up began: it stays placed, on other GPUs. Recorded, no move.
        note(session, hold, "hold", now=now, reason=f"re-placed: {reason}")
    else:
        move(session, hold, "hold", HoldStatus.PLACED.value, now=now, reason=f"re-placed: {reason}")
    if hold.warmup is None:
        hold.ready_at = now
        move(session, hold, "hold", HoldStatus.READY.value, now=now, reason="no warm-up profile")
    return True
