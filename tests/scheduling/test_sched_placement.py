"""Placement: best fit, topology rules, strategies, whole-or-nothing, determinism."""

from __future__ import annotations

import random

import pytest

from control_plane.scheduling.cluster import ClusterState, GpuSlot, uniform_cluster
from control_plane.scheduling.placement import PlacementRequest, fragmentation, place
from control_plane.schemas.enums import Strategy


def _cluster(layout: dict[tuple[str, str], dict[str, int]], model: str = "A100") -> ClusterState:
    """{(spine, leaf): {node: gpus}} -> state with GPUs named node-index."""
    slots = [
        GpuSlot(f"{node}-{i}", node, leaf, spine, model, i)
        for (spine, leaf), nodes in layout.items()
        for node, count in nodes.items()
        for i in range(count)
    ]
    return ClusterState.build(slots)


def _take_on(state: ClusterState, node: str, count: int) -> None:
    state.take([f"{node}-{i}" for i in range(count)])


def _nodes(state: ClusterState, uuids: list[str]) -> list[str]:
    return sorted({state.slots[u].node for u in uuids})


def _leaves(state: ClusterState, uuids: list[str]) -> list[int]:
    return sorted({int(state.slots[u].leaf.removeprefix("leaf")) for u in uuids})


def test_topology_sequence_on_an_empty_cluster_of_32_leaves() -> None:
    # 32 leaves x 4 nodes x 8 GPUs; best fit fills leaf 0 before opening leaf 1.
    state = ClusterState.build(uniform_cluster(32 * 4 * 8, 8, 4, leaves_per_spine=32))
    expected = [(16, [0], 2), (16, [0], 2), (32, [1], 4), (64, [2, 3], 8), (128, [4, 5, 6, 7], 16)]
    for count, leaves, nodes in expected:
        uuids = place(state, PlacementRequest(count))
        assert uuids is not None and len(uuids) == count == len(set(uuids))
        assert _leaves(state, uuids) == leaves
        assert len(_nodes(state, uuids)) == nodes
        # Whole nodes only: every node used gives all 8 GPUs.
        assert all(
            sum(1 for u in uuids if state.slots[u].node == n) == 8 for n in _nodes(state, uuids)
        )
        state.take(uuids)


def test_finishing_a_job_frees_exactly_its_gpus() -> None:
    state = ClusterState.build(uniform_cluster(256, 8, 4))
    jobs = []
    for count in (16, 8, 32, 3):
        uuids = place(state, PlacementRequest(count))
        assert uuids is not None
        state.take(uuids)
        jobs.append(uuids)
    before = state.taken()
    state.free(jobs[2])
    assert state.taken() == before - set(jobs[2])
    assert all(state.is_free(u) for u in jobs[2])
    assert state.free_count() == 256 - 16 - 8 - 3


def test_best_fit_picks_the_tighter_node() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8}})
    _take_on(state, "n1", 5)  # n1 has 3 free, n0 has 8
    assert _nodes(state, place(state, PlacementRequest(2))) == ["n1"]
    assert _nodes(state, place(state, PlacementRequest(3))) == ["n1"]
    assert _nodes(state, place(state, PlacementRequest(4))) == ["n0"]


def test_equally_tight_nodes_go_to_the_fuller_leaf_to_keep_whole_leaves_free() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8}, ("s0", "leaf1"): {"n2": 8, "n3": 8}})
    _take_on(state, "n3", 8)
    uuids = place(state, PlacementRequest(8))
    assert _nodes(state, uuids) == ["n2"]
    state.take(uuids)
    assert fragmentation(state, "A100").whole_free_leaves == 1


def test_one_node_is_preferred_to_several() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8, "n2": 8}})
    _take_on(state, "n0", 4)
    _take_on(state, "n2", 4)
    assert _nodes(state, place(state, PlacementRequest(8))) == ["n1"]


def test_split_request_stays_in_one_leaf_with_fewest_nodes() -> None:
    state = _cluster(
        {("s0", "leaf0"): {"n0": 8, "n1": 8}, ("s0", "leaf1"): {"n2": 8, "n3": 8, "n4": 8}}
    )
    _take_on(state, "n0", 4)
    _take_on(state, "n1", 4)
    _take_on(state, "n2", 5)
    _take_on(state, "n3", 6)
    _take_on(state, "n4", 5)
    # No node has 6 free; leaf0 has 4+4, leaf1 3+2+3: leaf0 it is, on two nodes.
    uuids = place(state, PlacementRequest(6))
    assert _nodes(state, uuids) == ["n0", "n1"]


def test_adjacent_leaves_prefer_one_spine() -> None:
    layout = {
        ("s0", "leaf0"): {"n0": 8, "n1": 8},
        ("s0", "leaf1"): {"n2": 8, "n3": 8},
        ("s1", "leaf2"): {"n4": 8, "n5": 8},
        ("s1", "leaf3"): {"n6": 8, "n7": 8},
    }
    state = _cluster(layout)
    _take_on(state, "n0", 8)
    # (leaf1, leaf2) comes first but crosses spines; (leaf2, leaf3) does not.
    assert _leaves(state, place(state, PlacementRequest(32))) == [2, 3]


def test_scattered_free_gpus_still_place_a_request_whole() -> None:
    state = ClusterState.build(uniform_cluster(64, 8, 2))
    for node in range(8):
        state.take([f"gpu-{node}-{i}" for i in range(7)])
    uuids = place(state, PlacementRequest(8))
    assert uuids is not None and len(_nodes(state, uuids)) == 8


def test_a_request_that_cannot_be_placed_whole_gets_nothing() -> None:
    state = ClusterState.build(uniform_cluster(16), taken=[f"gpu-0-{i}" for i in range(8)])
    state.take(["gpu-1-0"])
    assert place(state, PlacementRequest(8)) is None
    assert place(state, PlacementRequest(7)) is not None
    assert state.free_count() == 7  # place never changes the state


def test_gpu_model_is_respected_and_never_mixed() -> None:
    slots = uniform_cluster(8, model="A100") + [
        GpuSlot(f"h-{i}", "hnode", "leafH", "spine9", "H100", i) for i in range(4)
    ]
    state = ClusterState.build(slots)
    uuids = place(state, PlacementRequest(2, "H100"))
    assert {state.slots[u].model for u in uuids} == {"H100"}
    assert place(state, PlacementRequest(5, "H100")) is None
    assert place(state, PlacementRequest(1, "V100")) is None
    any_model = place(state, PlacementRequest(6))
    assert {state.slots[u].model for u in any_model} == {"A100"}
    state.take([f"gpu-0-{i}" for i in range(5)])
    # 3 A100 + 4 H100 free: 7 of one model do not exist.
    assert place(state, PlacementRequest(7)) is None
    assert {state.slots[u].model for u in place(state, PlacementRequest(4))} == {"H100"}


def test_distributed_spreads_over_the_emptiest_nodes_and_alternates_leaves() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8}, ("s0", "leaf1"): {"n2": 8, "n3": 8}})
    _take_on(state, "n1", 6)
    uuids = place(state, PlacementRequest(3, strategy=Strategy.DISTRIBUTED))
    nodes = _nodes(state, uuids)
    assert len(nodes) == 3 and "n1" not in nodes
    two = place(state, PlacementRequest(2, strategy=Strategy.DISTRIBUTED))
    assert _leaves(state, two) == [0, 1]
    # More GPUs than nodes: more rounds, still whole.
    many = place(state, PlacementRequest(12, strategy=Strategy.DISTRIBUTED))
    assert len(many) == 12 and len(_nodes(state, many)) == 4


def test_balanced_keeps_a_request_on_one_node_but_picks_the_emptiest() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8}})
    _take_on(state, "n0", 5)
    assert _nodes(state, place(state, PlacementRequest(2, strategy=Strategy.BALANCED))) == ["n1"]
    assert _nodes(state, place(state, PlacementRequest(2))) == ["n0"]


def test_balanced_places_a_request_larger_than_a_node_as_consolidated() -> None:
    state = _cluster({("s0", "leaf0"): {"n0": 8, "n1": 8}, ("s0", "leaf1"): {"n2": 8, "n3": 8}})
    _take_on(state, "n1", 4)
    # 12 GPUs fit no node. Both leaves hold them on two nodes; leaf0 has fewer free GPUs, so
    # n0 gives all 8 and n1 its 4 free ones (worst fit would have opened the empty leaf1).
    expected = [f"n0-{i}" for i in range(8)] + [f"n1-{i}" for i in range(4, 8)]
    assert place(state, PlacementRequest(12, strategy=Strategy.BALANCED)) == expected
    assert place(state, PlacementRequest(12)) == expected
    # A request that fits one node still goes to the emptiest node of the emptiest leaf.
    assert _nodes(state, place(state, PlacementRequest(4, strategy=Strategy.BALANCED))) == ["n2"]


def test_balanced_spans_the_fewest_adjacent_leaves_on_the_fewest_nodes() -> None:
    state = _cluster(
        {
            ("s0", "leaf0"): {"n0": 8, "n1": 8},
            ("s0", "leaf1"): {"n2": 8, "n3": 8},
            ("s0", "leaf2"): {"n4": 8, "n5": 8},
        }
    )
    _take_on(state, "n0", 8)
    _take_on(state, "n3", 6)
    # Free: leaf0 8, leaf1 10, leaf2 16. No leaf holds 20; of two adjacent leaves only
    # (leaf1, leaf2) does. Three nodes at least: n2 and n4 whole, the rest on n5.
    expected = [f"{n}-{i}" for n in ("n2", "n4") for i in range(8)] + [f"n5-{i}" for i in range(4)]
    assert place(state, PlacementRequest(20, strategy=Strategy.BALANCED)) == expected
    assert place(state, PlacementRequest(20)) == expected


def test_placement_is_deterministic_whatever_the_input_order() -> None:
    slots = uniform_cluster(512, 8, 4)
    shuffled = slots[:]
    random.Random(7).shuffle(shuffled)
    a, b = ClusterState.build(slots), ClusterState.build(shuffled)
    rng = random.Random(3)
    for _ in range(60):
        request = PlacementRequest(
            rng.choice([1, 2, 4, 8, 16, 24]), None, rng.choice(list(Strategy))
        )
        ua, ub = place(a, request), place(b, request)
        assert ua == ub == place(a, request)
        if ua is not None:
            a.take(ua)
            b.take(ub)


def test_consolidated_leaves_more_whole_nodes_than_distributed() -> None:
    results = {}
    for strategy in (Strategy.CONSOLIDATED, Strategy.DISTRIBUTED):
        state = ClusterState.build(uniform_cluster(128, 8, 4))
        for count in (1, 2, 3, 1, 4, 2, 1):
            state.take(place(state, PlacementRequest(count, strategy=strategy)))
        results[strategy] = fragmentation(state, "gpu")
    assert results[Strategy.CONSOLIDATED].whole_free_nodes == 14
    assert results[Strategy.DISTRIBUTED].whole_free_nodes < 14
    assert results[Strategy.CONSOLIDATED].score() < results[Strategy.DISTRIBUTED].score()


def test_fragmentation_score_counts_whole_free_leaves() -> None:
    layout = {("s0", f"leaf{lf}"): {f"n{2 * lf}": 8, f"n{2 * lf + 1}": 8} for lf in range(3)}
    empty = fragmentation(_cluster(layout), "A100")
    assert (empty.whole_free_leaves, empty.whole_free_leaf_gpus) == (3, 48)
    assert empty.score() == 0.0
    # Two used nodes in one leaf or in two: four whole free nodes either way, but one whole
    # free leaf fewer when they are spread, which scores worse.
    packed, spread = _cluster(layout), _cluster(layout)
    for node in ("n0", "n1"):
        _take_on(packed, node, 8)
    for node in ("n0", "n2"):
        _take_on(spread, node, 8)
    a, b = fragmentation(packed, "A100"), fragmentation(spread, "A100")
    assert a.whole_free_nodes == b.whole_free_nodes == 4
    assert (a.whole_free_leaf_gpus, b.whole_free_leaf_gpus) == (32, 16)
    assert a.score() == 0.0 and b.score() == 0.25
    # No whole node at all: the worst score.
    scattered = _cluster(layout)
    for n in range(6):
        _take_on(scattered, f"n{n}", 1)
    assert fragmentation(scattered, "A100").score() == 1.0


def test_request_of_zero_gpus_is_an_error() -> None:
    with pytest.raises(ValueError):
        place(ClusterState.build(uniform_cluster(8)), PlacementRequest(0))
