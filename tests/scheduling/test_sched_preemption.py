"""Holds never block real demand: preemption order, minimal sets, and the speculative budget."""

from __future__ import annotations

from control_plane.scheduling.cluster import ClusterState, GpuSlot, uniform_cluster
from control_plane.scheduling.placement import PlacementRequest
from control_plane.scheduling.preemption import (
    HoldView,
    SpeculativeBudget,
    check_hold_budget,
    choose_preemptions,
    preemption_order,
)


def _node_gpus(node: int, count: int = 8) -> tuple[str, ...]:
    return tuple(f"gpu-{node}-{i}" for i in range(count))


def _full_cluster_of_holds(holds: list[HoldView], gpus: int = 32) -> ClusterState:
    state = ClusterState.build(uniform_cluster(gpus, 8, 4))
    for hold in holds:
        state.take(hold.gpu_uuids)
    return state


def test_order_is_lowest_confidence_then_youngest() -> None:
    holds = [
        HoldView("old-weak", "t", (), 0.2, created_at=10.0),
        HoldView("young-weak", "t", (), 0.2, created_at=50.0),
        HoldView("sure", "t", (), 0.9, created_at=99.0),
    ]
    assert [h.id for h in preemption_order(holds)] == ["young-weak", "old-weak", "sure"]


def test_fitting_request_preempts_nothing() -> None:
    state = ClusterState.build(uniform_cluster(16))
    choice = choose_preemptions(state, PlacementRequest(8), [])
    assert choice is not None and choice.hold_ids == () and len(choice.gpu_uuids) == 8


def test_real_allocation_preempts_the_weakest_youngest_hold_and_says_which() -> None:
    holds = [
        HoldView("a", "t1", _node_gpus(0), 0.9, created_at=1.0),
        HoldView("b", "t2", _node_gpus(1), 0.3, created_at=1.0),
        HoldView("c", "t2", _node_gpus(2), 0.3, created_at=5.0),
        HoldView("d", "t3", _node_gpus(3), 0.6, created_at=9.0),
    ]
    state = _full_cluster_of_holds(holds)
    choice = choose_preemptions(state, PlacementRequest(8), holds)
    assert choice is not None
    assert choice.hold_ids == ("c",)
    assert set(choice.gpu_uuids) == set(_node_gpus(2))
    # The state is left exactly as it was.
    assert state.free_count() == 0


def test_preemption_set_is_trimmed_to_a_minimal_one() -> None:
    # Order: tiny1 (1 GPU), tiny2 (1 GPU), big (8 GPUs). Fitting 8 needs big; the tiny ones
    # taken on the way are not needed once big is in.
    tiny1 = HoldView("tiny1", "t", ("gpu-0-0",), 0.1, created_at=3.0)
    tiny2 = HoldView("tiny2", "t", ("gpu-0-1",), 0.1, created_at=2.0)
    big = HoldView("big", "t", _node_gpus(1), 0.5, created_at=1.0)
    rest = HoldView("rest", "t", _node_gpus(0)[2:] + _node_gpus(2) + _node_gpus(3), 0.99, 0.0)
    holds = [tiny1, tiny2, big, rest]
    state = _full_cluster_of_holds(holds)
    choice = choose_preemptions(state, PlacementRequest(8), holds)
    assert choice is not None and choice.hold_ids == ("big",)


def test_partial_frees_combine_with_free_gpus() -> None:
    hold = HoldView("h", "t", _node_gpus(0, 4), 0.5, created_at=0.0)
    state = ClusterState.build(uniform_cluster(8), taken=hold.gpu_uuids)
    choice = choose_preemptions(state, PlacementRequest(6), [hold])
    assert choice is not None and choice.hold_ids == ("h",) and len(choice.gpu_uuids) == 6


def test_none_when_even_all_holds_would_not_fit_and_state_untouched() -> None:
    hold = HoldView("h", "t", _node_gpus(0, 2), 0.5, created_at=0.0)
    running = _node_gpus(0)[2:] + _node_gpus(1)
    state = ClusterState.build(uniform_cluster(16), taken=(*hold.gpu_uuids, *running))
    assert choose_preemptions(state, PlacementRequest(3), [hold]) is None
    assert state.free_count() == 0


def test_only_weaker_holds_are_candidates_for_a_hold() -> None:
    holds = [HoldView("x", "t", _node_gpus(0), 0.8, created_at=0.0)]
    state = _full_cluster_of_holds(holds, gpus=8)
    assert choose_preemptions(state, PlacementRequest(1), holds, below_confidence=0.8) is None
    choice = choose_preemptions(state, PlacementRequest(1), holds, below_confidence=0.9)
    assert choice is not None and choice.hold_ids == ("x",)


def test_holds_of_another_model_are_not_preempted() -> None:
    slots = uniform_cluster(8, model="A100") + [
        GpuSlot(f"h-{i}", "hn", "leafH", "spine9", "H100", i) for i in range(8)
    ]
    a_hold = HoldView("a", "t", _node_gpus(0), 0.1, created_at=9.0)
    h_hold = HoldView("h", "t", tuple(f"h-{i}" for i in range(8)), 0.5, created_at=0.0)
    state = ClusterState.build(slots, taken=(*a_hold.gpu_uuids, *h_hold.gpu_uuids))
    choice = choose_preemptions(state, PlacementRequest(2, "H100"), [a_hold, h_hold])
    assert choice is not None and choice.hold_ids == ("h",)
    assert all(u.startswith("h-") for u in choice.gpu_uuids)


def test_speculative_budget_caps_held_gpus_and_idle_hours() -> None:
    budget = SpeculativeBudget(max_held_gpus=8, max_idle_gpu_hours_per_day=4.0)
    assert check_hold_budget(budget, held_gpus=4, gpu_count=4).allowed
    refused = check_hold_budget(budget, held_gpus=4, gpu_count=5)
    assert not refused.allowed and "speculative budget of 8" in refused.reason
    tired = check_hold_budget(budget, held_gpus=0, gpu_count=1, idle_gpu_hours_today=4.0)
    assert not tired.allowed and "daily limit" in tired.reason
