"""Invariants over random request streams: no GPU is ever double-assigned, quotas, class shares
and hold budgets always hold."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.scheduling.cluster import ClusterState, GpuSlot, uniform_cluster
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import (
    HoldView,
    SpeculativeBudget,
    check_hold_budget,
    choose_preemptions,
)
from control_plane.scheduling.quotas import QuotaVerdict, TenantQuota, TenantUsage, check_quota
from control_plane.schemas.enums import JobClass, Strategy

TENANTS = ("t0", "t1", "t2")

request_st = st.tuples(
    st.sampled_from(TENANTS),
    st.integers(1, 40),
    st.sampled_from(list(Strategy)),
    st.sampled_from([None, "A100", "H100"]),
    st.sampled_from(list(JobClass)),
)
op_st = st.one_of(
    st.tuples(st.just("alloc"), request_st),
    st.tuples(st.just("hold"), request_st),
    st.tuples(st.just("release"), st.integers(0, 1000)),
)
quota_st = st.tuples(st.integers(0, 48), st.integers(0, 16), st.none() | st.floats(0, 1))
budget_st = st.tuples(st.integers(0, 48), st.none() | st.floats(0, 4))


def _mixed_cluster() -> list[GpuSlot]:
    a100 = uniform_cluster(96, 8, 3, leaves_per_spine=2, model="A100")
    h100 = [
        GpuSlot(f"h-{n}-{i}", f"hnode{n}", f"hleaf{n // 2}", "hspine", "H100", i)
        for n in range(5)
        for i in range(4)
    ]
    return a100 + h100


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(op_st, max_size=80),
    quotas=st.fixed_dictionaries({t: quota_st for t in TENANTS}),
    budgets=st.fixed_dictionaries({t: budget_st for t in TENANTS}),
)
def test_no_double_assignment_and_quotas_hold(
    ops: list[tuple[str, Any]],
    quotas: dict[str, tuple[int, int, float | None]],
    budgets: dict[str, tuple[int, float | None]],
) -> None:
    state = ClusterState.build(_mixed_cluster())
    tenant_quota = {t: TenantQuota(q, b, s) for t, (q, b, s) in quotas.items()}
    budget = {t: SpeculativeBudget(m, d) for t, (m, d) in budgets.items()}
    usage = {t: TenantUsage() for t in TENANTS}
    # GPUs each tenant's admitted requests of each class got above a guarantee (as burst).
    burst = {t: dict.fromkeys(JobClass, 0) for t in TENANTS}
    owner: dict[str, str] = {}  # GPU -> id of the allocation or hold holding it
    # (id, tenant, gpus, class or None for a hold, burst GPUs of the grant)
    grants: list[tuple[str, str, list[str], JobClass | None, int]] = []
    holds: dict[str, HoldView] = {}
    for n, (op, arg) in enumerate(ops):
        if op == "release":
            if grants:
                grant_id, tenant, gpus, job_class, extra = grants.pop(arg % len(grants))
                state.free(gpus)
                for uuid in gpus:
                    del owner[uuid]
                if job_class is None:
                    del holds[grant_id]
                else:
                    usage[tenant] = usage[tenant].plus(-len(gpus), job_class)
                    burst[tenant][job_class] -= extra
            continue
        tenant, count, strategy, model, job_class = arg
        request = PlacementRequest(count, model, strategy)
        # Placement needs `count` free GPUs of one model: the one asked for, or any one.
        models = [model] if model is not None else list(state.models())
        free_before = max(state.free_count(m) for m in models)
        extra = 0
        if op == "hold":
            gpus = place(state, request)
            assert (gpus is not None) == (free_before >= count)
            # Holds draw on the tenant's speculative budget (max held GPUs, idle hours today).
            held = sum(len(h.gpu_uuids) for h in holds.values() if h.tenant_id == tenant)
            idle_today = float(n % 4)
            allowed = check_hold_budget(
                budget[tenant], held, count, idle_gpu_hours_today=idle_today
            ).allowed
            limit = budget[tenant].max_idle_gpu_hours_per_day
            assert allowed == (
                held + count <= budget[tenant].max_held_gpus
                and (limit is None or idle_today < limit)
            )
            if gpus is None or not allowed:
                continue
            grant_id = f"hold{n}"
            holds[grant_id] = HoldView(grant_id, tenant, tuple(gpus), (n % 7) / 7, float(n))
            grants.append((grant_id, tenant, gpus, None, 0))
        else:
            quota, used = tenant_quota[tenant], usage[tenant]
            decision = check_quota(quota, used, count, job_class)
            _check_verdict(quota, used, count, job_class, decision.verdict, decision.burst_gpus)
            if not decision.admitted:
                continue
            choice = choose_preemptions(state, request, list(holds.values()))
            # Holds never block real demand: the request is placed whenever free and held GPUs
            # of one model it can use are enough.
            held_of = Counter(state.slots[u].model for h in holds.values() for u in h.gpu_uuids)
            room = max(state.free_count(m) + held_of[m] for m in models)
            assert (choice is not None) == (room >= count)
            if choice is None:
                continue
            grant_id = f"alloc{n}"
            for hold_id in choice.hold_ids:
                hold = holds.pop(hold_id)
                state.free(hold.gpu_uuids)
                for uuid in hold.gpu_uuids:
                    del owner[uuid]
                grants[:] = [g for g in grants if g[0] != hold_id]
            gpus = list(choice.gpu_uuids)
            usage[tenant] = usage[tenant].plus(count, job_class)
            extra = decision.burst_gpus
            burst[tenant][job_class] += extra
            grants.append((grant_id, tenant, gpus, job_class, extra))
        # The request got exactly what it asked, of one model, none of it already owned.
        assert len(gpus) == count == len(set(gpus))
        assert len({state.slots[u].model for u in gpus}) == 1
        if model is not None:
            assert all(state.slots[u].model == model for u in gpus)
        assert not any(u in owner for u in gpus)
        state.take(gpus)  # raises DoubleAssignment on any overlap with the state
        owner.update(dict.fromkeys(gpus, grant_id))
        # Invariants after every step.
        assert state.taken() == set(owner)
        assert state.free_count() == state.total_count() - len(owner)
        for t in TENANTS:
            quota = tenant_quota[t]
            assert 0 <= usage[t].total <= quota.limit
            # GPUs above the guarantee were all admitted as burst...
            assert usage[t].total - quota.quota_gpus <= sum(burst[t].values())
            if quota.online_share is not None:
                # ...and so were those a class uses above its share (borrowed or burst).
                for job_class, share in quota.class_guarantees().items():
                    assert usage[t].of(JobClass(job_class)) - share <= burst[t][job_class]
            held = sum(len(h.gpu_uuids) for h in holds.values() if h.tenant_id == t)
            assert held <= budget[t].max_held_gpus


@settings(max_examples=300, deadline=None)
@given(
    quota=quota_st,
    online=st.integers(0, 64),
    batch=st.integers(0, 64),
    count=st.integers(1, 64),
    job_class=st.sampled_from(list(JobClass)),
)
def test_quota_verdicts_follow_the_table_from_any_usage(
    quota: tuple[int, int, float | None],
    online: int,
    batch: int,
    count: int,
    job_class: JobClass,
) -> None:
    # Any usage, also states a stream rarely reaches (a class far above its share).
    tenant_quota, usage = TenantQuota(*quota), TenantUsage(online, batch)
    decision = check_quota(tenant_quota, usage, count, job_class)
    _check_verdict(tenant_quota, usage, count, job_class, decision.verdict, decision.burst_gpus)
    if decision.admitted:
        # Every GPU above the guarantee or the class's share is counted as burst.
        after = usage.plus(count, job_class)
        above = after.total - tenant_quota.quota_gpus
        if tenant_quota.online_share is not None:
            share = tenant_quota.class_guarantees()[job_class]
            above = max(above, after.of(job_class) - share)
        assert decision.burst_gpus == min(count, max(0, above))


def _check_verdict(
    quota: TenantQuota,
    usage: TenantUsage,
    count: int,
    job_class: JobClass,
    verdict: QuotaVerdict,
    burst_gpus: int,
) -> None:
    """The verdict of one request, against the documented table."""
    after = usage.total + count
    own = None if quota.online_share is None else quota.class_guarantees()[job_class]
    if verdict == QuotaVerdict.ADMIT:
        assert after <= quota.quota_gpus and burst_gpus == 0
        assert own is None or usage.of(job_class) + count <= own
    elif verdict == QuotaVerdict.BURST:
        assert after <= quota.limit and 1 <= burst_gpus <= count
    else:
        assert burst_gpus == 0
    if own is not None and usage.of(job_class) + count <= own:
        # A class's guarantee is its own: a request within it is never refused, only queued
        # while the other class borrows from it.
        assert verdict != QuotaVerdict.REFUSE
    if verdict == QuotaVerdict.QUEUE:
        assert own is not None and usage.of(job_class) + count <= own
        other = JobClass.BATCH if job_class == JobClass.ONLINE else JobClass.ONLINE
        assert usage.of(other) > quota.class_guarantees()[other]


@settings(max_examples=80, deadline=None)
@given(
    taken=st.sets(st.integers(0, 127), max_size=127),
    count=st.integers(1, 130),
    strategy=st.sampled_from(list(Strategy)),
)
def test_place_succeeds_exactly_when_enough_gpus_are_free_and_never_mutates(
    taken: set[int], count: int, strategy: Strategy
) -> None:
    slots = uniform_cluster(128, 8, 4, leaves_per_spine=2)
    state = ClusterState.build(slots, taken=[slots[i].uuid for i in taken])
    before = state.taken()
    gpus = place(state, PlacementRequest(count, strategy=strategy))
    assert state.taken() == before
    if 128 - len(taken) < count:
        assert gpus is None
    else:
        assert gpus is not None and len(set(gpus)) == count
        assert all(state.is_free(u) for u in gpus)
