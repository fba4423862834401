"""Invariants over random request streams: no GPU is ever double-assigned, quotas always hold."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.scheduling.cluster import ClusterState, GpuSlot, uniform_cluster
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import HoldView, choose_preemptions
from control_plane.scheduling.quotas import TenantQuota, TenantUsage, check_quota
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
)
def test_no_double_assignment_and_quotas_hold(
    ops: list[tuple[str, Any]], quotas: dict[str, tuple[int, int, float | None]]
) -> None:
    state = ClusterState.build(_mixed_cluster())
    tenant_quota = {t: TenantQuota(q, b, s) for t, (q, b, s) in quotas.items()}
    usage = {t: TenantUsage() for t in TENANTS}
    owner: dict[str, str] = {}  # GPU -> id of the allocation or hold holding it
    grants: list[tuple[str, str, list[str], JobClass | None]] = []  # (id, tenant, gpus, class)
    holds: dict[str, HoldView] = {}
    for n, (op, arg) in enumerate(ops):
        if op == "release":
            if grants:
                grant_id, tenant, gpus, job_class = grants.pop(arg % len(grants))
                state.free(gpus)
                for uuid in gpus:
                    del owner[uuid]
                if job_class is None:
                    del holds[grant_id]
                else:
                    usage[tenant] = usage[tenant].plus(-len(gpus), job_class)
            continue
        tenant, count, strategy, model, job_class = arg
        request = PlacementRequest(count, model, strategy)
        free_before = state.free_count(model)
        if op == "hold":
            gpus = place(state, request)
            assert (gpus is not None) == (free_before >= count) or model is None
            if gpus is None:
                continue
            grant_id = f"hold{n}"
            holds[grant_id] = HoldView(grant_id, tenant, tuple(gpus), (n % 7) / 7, float(n))
            grants.append((grant_id, tenant, gpus, None))
        else:
            decision = check_quota(tenant_quota[tenant], usage[tenant], count, job_class)
            if not decision.admitted:
                continue
            choice = choose_preemptions(state, request, list(holds.values()))
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
            grants.append((grant_id, tenant, gpus, job_class))
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
            assert 0 <= usage[t].total <= tenant_quota[t].limit


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
