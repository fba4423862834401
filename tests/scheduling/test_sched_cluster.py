"""ClusterState: topology order, take/free bookkeeping, and refusal of double assignment."""

from __future__ import annotations

import pytest

from control_plane.scheduling.cluster import (
    ClusterState,
    DoubleAssignment,
    GpuSlot,
    NotAssigned,
    natural_key,
    uniform_cluster,
)


def _slot(
    uuid: str, node: str, leaf: str = "leaf0", spine: str = "spine0", model: str = "A100"
) -> GpuSlot:
    return GpuSlot(uuid, node, leaf, spine, model)


def test_natural_order_puts_leaf2_before_leaf10() -> None:
    names = ["leaf10", "leaf2", "leaf1", "leaf20", "leafA"]
    assert sorted(names, key=natural_key) == ["leaf1", "leaf2", "leaf10", "leaf20", "leafA"]


def test_leaves_and_nodes_are_ordered_by_spine_then_leaf_naturally() -> None:
    gpus = [
        _slot("a", "n10", "leaf10"),
        _slot("b", "n2", "leaf2"),
        _slot("c", "n1", "leaf2"),
        _slot("d", "n0", "leaf1", spine="spine1"),
    ]
    state = ClusterState.build(gpus)
    assert state.leaves == (("spine0", "leaf2"), ("spine0", "leaf10"), ("spine1", "leaf1"))
    assert state.nodes == ("n1", "n2", "n10", "n0")


def test_take_and_free_update_counts_per_model() -> None:
    gpus = [_slot(f"a{i}", "n0") for i in range(4)] + [
        _slot(f"h{i}", "n1", model="H100") for i in range(2)
    ]
    state = ClusterState.build(gpus, taken=["a0"])
    assert state.free_count() == 5
    assert state.free_count("A100") == 3
    assert state.free_count("H100") == 2
    assert state.free_count("V100") == 0
    state.take(["h0", "a1"])
    assert (state.free_count("A100"), state.free_count("H100")) == (2, 1)
    assert not state.is_free("h0")
    state.free(["h0", "a0"])
    assert state.is_free("h0") and state.is_free("a0")
    assert (state.free_count("A100"), state.free_count("H100"), state.free_count()) == (3, 2, 5)


def test_take_refuses_taken_unknown_and_repeated_gpus_atomically() -> None:
    state = ClusterState.build(uniform_cluster(16), taken=["gpu-0-0"])
    for bad in (["gpu-0-1", "gpu-0-0"], ["gpu-0-1", "nope"], ["gpu-0-1", "gpu-0-1"]):
        with pytest.raises(DoubleAssignment):
            state.take(bad)
        # Nothing of a refused take sticks.
        assert state.is_free("gpu-0-1")
        assert state.free_count() == 15


def test_free_refuses_free_and_unknown_gpus_atomically() -> None:
    state = ClusterState.build(uniform_cluster(8), taken=["gpu-0-0"])
    with pytest.raises(NotAssigned):
        state.free(["gpu-0-0", "gpu-0-1"])
    with pytest.raises(NotAssigned):
        state.free(["ghost"])
    assert not state.is_free("gpu-0-0")
    assert state.free_count() == 7


def test_build_rejects_a_gpu_listed_twice_or_a_node_under_two_leaves() -> None:
    with pytest.raises(ValueError, match="twice"):
        ClusterState.build([_slot("a", "n0"), _slot("a", "n1")])
    with pytest.raises(ValueError, match="two leaves"):
        ClusterState.build([_slot("a", "n0", "leaf0"), _slot("b", "n0", "leaf1")])


def test_copy_is_independent() -> None:
    state = ClusterState.build(uniform_cluster(8))
    twin = state.copy()
    twin.take(["gpu-0-0"])
    assert state.is_free("gpu-0-0")
    assert not twin.is_free("gpu-0-0")


def test_uniform_cluster_shape() -> None:
    slots = uniform_cluster(20, gpus_per_node=8, nodes_per_leaf=2, leaves_per_spine=1)
    state = ClusterState.build(slots)
    assert len(state.nodes) == 3  # the last node holds 4 GPUs
    assert state.leaves == (("spine0", "leaf0"), ("spine1", "leaf1"))
    assert state.total_count() == 20
