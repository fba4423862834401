"""Multi-node placement on partly used clusters (consolidated), checked against brute force."""

from __future__ import annotations

import random
from collections import Counter
from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.scheduling import ClusterState, PlacementRequest, place
from control_plane.scheduling.cluster import uniform_cluster

GPUS_PER_NODE = 8
NODES_PER_LEAF = 4
LEAVES = 8
LEAVES_PER_SPINE = 3  # spines of 3, 3 and 2 leaves: some runs of leaves cross a spine
NODES = LEAVES * NODES_PER_LEAF
FULL = NODES * GPUS_PER_NODE


def _min_nodes(frees: list[int], count: int) -> int:
    """Fewest of these nodes whose free GPUs add up to `count` (largest first)."""
    for i, total in enumerate(accumulate(sorted(frees, reverse=True))):
        if total >= count:
            return i + 1
    raise AssertionError("the nodes do not hold the request")


# GPUs used per node: nodes mostly empty or full (so that whole-node requests meet every
# case), or all partly used (so that leaves differ in how many nodes a request needs).
used_st = st.one_of(
    st.lists(
        st.one_of(st.just(0), st.just(GPUS_PER_NODE), st.integers(0, GPUS_PER_NODE)),
        min_size=NODES,
        max_size=NODES,
    ),
    st.lists(st.integers(0, GPUS_PER_NODE - 1), min_size=NODES, max_size=NODES),
)
count_st = st.one_of(
    st.integers(1, GPUS_PER_NODE),
    st.integers(GPUS_PER_NODE + 1, NODES_PER_LEAF * GPUS_PER_NODE),
    st.integers(1, NODES).map(lambda k: k * GPUS_PER_NODE),
    st.integers(1, FULL),
)


@settings(max_examples=300, deadline=None)
@given(
    used=used_st,
    count=count_st,
    short=st.integers(0, GPUS_PER_NODE - 1),
    seed=st.integers(0, 2**16),
)
def test_consolidated_multi_node_rule_on_partly_used_clusters(
    used: list[int], count: int, short: int, seed: int
) -> None:
    # `short` GPUs fewer make the last node a partial one.
    slots = uniform_cluster(FULL - short, GPUS_PER_NODE, NODES_PER_LEAF, LEAVES_PER_SPINE)
    per_node: dict[int, list[str]] = {}
    for slot in slots:
        per_node.setdefault(int(slot.node.removeprefix("node")), []).append(slot.uuid)
    rng = random.Random(seed)
    taken = [
        u for n, uuids in per_node.items() for u in rng.sample(uuids, min(used[n], len(uuids)))
    ]
    state = ClusterState.build(slots, taken)
    # The brute-force view: free GPUs per node and per leaf, the spine of each leaf.
    node_free = {n: len(uuids) - min(used[n], len(uuids)) for n, uuids in per_node.items()}
    leaf_of = {n: n // NODES_PER_LEAF for n in node_free}
    leaf_nodes = {lf: [n for n in node_free if leaf_of[n] == lf] for lf in range(LEAVES)}
    leaf_free = {lf: sum(node_free[n] for n in ns) for lf, ns in leaf_nodes.items()}

    request = PlacementRequest(count)
    gpus = place(state, request)
    assert state.taken() == set(taken)  # place never changes the state
    if sum(node_free.values()) < count:
        assert gpus is None
        return
    # Never in part, only free GPUs, and deterministic whatever order the GPUs were listed in.
    assert gpus is not None and len(gpus) == count == len(set(gpus))
    assert all(state.is_free(u) for u in gpus)
    assert place(state, request) == gpus
    shuffled = slots[:]
    rng.shuffle(shuffled)
    assert place(ClusterState.build(shuffled, taken), request) == gpus

    on_node = Counter(int(state.slots[u].node.removeprefix("node")) for u in gpus)
    fits_one = [n for n in node_free if node_free[n] >= count]
    if fits_one:
        # One node: best fit, ties to the fuller leaf, then the first node.
        best = min(fits_one, key=lambda n: (node_free[n], leaf_free[leaf_of[n]], n))
        assert list(on_node) == [best]
        return

    # Several nodes: every node used gives all its free GPUs but at most one, which takes the
    # rest and is the tightest unused node of the chosen leaves that holds that rest.
    partial = [n for n in on_node if on_node[n] < node_free[n]]
    assert len(partial) <= 1
    leaves_used = {leaf_of[n] for n in on_node}
    fits_leaf = [lf for lf in range(LEAVES) if leaf_free[lf] >= count]
    if fits_leaf:
        # One leaf: the one needing the fewest nodes, then the fewest free GPUs, then the first.
        def key(lf: int) -> tuple[int, int, int]:
            frees = [node_free[n] for n in leaf_nodes[lf]]
            return (_min_nodes(frees, count), leaf_free[lf], lf)

        chosen = [min(fits_leaf, key=key)]
    else:
        # Adjacent leaves: the shortest run that holds the request; among those, one inside a
        # spine, then the fewest free GPUs, then the first.
        width = next(
            w
            for w in range(2, LEAVES + 1)
            if any(
                sum(leaf_free[lf] for lf in range(s, s + w)) >= count for s in range(LEAVES - w + 1)
            )
        )
        runs = [
            (s // LEAVES_PER_SPINE != (s + width - 1) // LEAVES_PER_SPINE, free, s)
            for s in range(LEAVES - width + 1)
            if (free := sum(leaf_free[lf] for lf in range(s, s + width))) >= count
        ]
        start = min(runs)[2]
        chosen = list(range(start, start + width))
        # The run is minimal, so both its end leaves are used.
        assert min(leaves_used) == chosen[0] and max(leaves_used) == chosen[-1]
    region = [n for lf in chosen for n in leaf_nodes[lf]]
    assert leaves_used <= set(chosen)
    assert len(on_node) == _min_nodes([node_free[n] for n in region], count)
    for p in partial:
        rest = on_node[p]
        assert not any(rest <= node_free[q] < node_free[p] for q in region if q not in on_node)
