"""Placement: which free GPUs a request gets, topology-aware and deterministic."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from control_plane.scheduling.cluster import ClusterState, ModelIndex
from control_plane.schemas.enums import Strategy


@dataclass(frozen=True)
class PlacementRequest:
    """N GPUs of a model (None: any one model) under a strategy."""

    gpu_count: int
    gpu_model: str | None = None
    strategy: Strategy = Strategy.CONSOLIDATED


# A plan is the nodes used and how many GPUs each gives, in the order they were chosen.
Plan = list[tuple[int, int]]


def place(state: ClusterState, request: PlacementRequest) -> list[str] | None:
    """GPU uuids for the request, or None when not enough free GPUs of one model exist.

    Topology is a preference, never a reason to refuse: the request is placed whenever some
    model has `gpu_count` free GPUs, and never in part. The state is not changed; the caller
    takes the GPUs.
    """
    count = request.gpu_count
    if count < 1:
        raise ValueError("gpu_count must be at least 1")
    if request.gpu_model is not None:
        idx = state.model_index(request.gpu_model)
        if idx is None or idx.free < count:
            return None
        return _gpus(state, idx, _plan(state, idx, count, request.strategy))
    fitting = [idx for idx in state.model_indexes() if idx.free >= count]
    if not fitting:
        return None
    if request.strategy == Strategy.CONSOLIDATED:
        # Any model: the plan touching the fewest leaves, then nodes, then the tightest model.
        best: tuple[tuple[int, int, int, int], ModelIndex, Plan] | None = None
        for rank, idx in enumerate(fitting):
            plan = _plan(state, idx, count, request.strategy)
            leaves = len({state.node_leaf[node] for node, _ in plan})
            score = (leaves, len(plan), idx.free, rank)
            if best is None or score < best[0]:
                best = (score, idx, plan)
        assert best is not None
        return _gpus(state, best[1], best[2])
    # Spreading strategies go to the model with the most free GPUs.
    idx = min(fitting, key=lambda i: -i.free)
    return _gpus(state, idx, _plan(state, idx, count, request.strategy))


def _gpus(state: ClusterState, idx: ModelIndex, plan: Plan) -> list[str]:
    uuids: list[str] = []
    for node, count in plan:
        uuids.extend(state.free_gpus_on(idx, node, count))
    return uuids


def _plan(state: ClusterState, idx: ModelIndex, count: int, strategy: Strategy) -> Plan:
    if strategy == Strategy.DISTRIBUTED:
        return _spread(idx, count)
    node = _single_node(idx, count, tight=strategy == Strategy.CONSOLIDATED)
    if node is not None:
        return [(node, count)]
    plan = _one_leaf(state, idx, count)
    if plan is not None:
        return plan
    return _adjacent_leaves(state, idx, count)


def _single_node(idx: ModelIndex, count: int, *, tight: bool) -> int | None:
    """Best fit (tight) or worst fit node with `count` free GPUs, None if no node has them."""
    if count > idx.max_per_node:
        return None
    leaf_free = idx.leaf_free
    sizes = range(count, idx.max_per_node + 1)
    for k in sizes if tight else reversed(sizes):
        bucket = idx.buckets[k]
        if bucket:
            # Anti-fragmentation: among equally tight nodes, use the leaf with the fewest free
            # GPUs so that emptier leaves stay whole; balanced does the opposite.
            if tight:
                leaf = min(bucket, key=lambda lf: (leaf_free[lf], lf))
            else:
                leaf = min(bucket, key=lambda lf: (-leaf_free[lf], lf))
            return min(bucket[leaf])
    return None


def _fewest_nodes(state: ClusterState, idx: ModelIndex, nodes: list[int], count: int) -> Plan:
    """Cover `count` GPUs with the fewest nodes: the largest fully, the rest on the tightest."""
    node_free = idx.node_free
    leaf_free = idx.leaf_free
    node_leaf = state.node_leaf
    order = sorted(
        (n for n in nodes if node_free[n]),
        key=lambda n: (-node_free[n], leaf_free[node_leaf[n]], n),
    )
    plan: Plan = []
    remaining = count
    for i, node in enumerate(order):
        free = node_free[node]
        if free >= remaining:
            # The rest fits on one node: the tightest unused node that holds it (best fit).
            last = min(
                (n for n in order[i:] if node_free[n] >= remaining),
                key=lambda n: (node_free[n], leaf_free[node_leaf[n]], n),
            )
            plan.append((last, remaining))
            return plan
        plan.append((node, free))
        remaining -= free
    raise AssertionError("nodes given do not hold enough free GPUs")


def _nodes_needed(idx: ModelIndex, nodes: tuple[int, ...], count: int) -> int:
    frees = sorted((idx.node_free[n] for n in nodes), reverse=True)
    for i, total in enumerate(accumulate(frees)):
        if total >= count:
            return i + 1
    return len(frees) + 1


def _one_leaf(state: ClusterState, idx: ModelIndex, count: int) -> Plan | None:
    """Several nodes of one leaf: fewest nodes first, then the leaf with fewest free GPUs."""
    leaf_free = idx.leaf_free
    candidates = [lf for lf in idx.leaves if leaf_free[lf] >= count]
    candidates.sort(key=leaf_free.__getitem__)
    if not candidates:
        return None
    # No plan can use fewer nodes than this: the emptiest node sets the bound.
    fullest = next(k for k in range(idx.max_per_node, 0, -1) if idx.buckets[k])
    floor = -(-count // fullest)
    best: tuple[int, int, int] | None = None
    for leaf in candidates:
        needed = _nodes_needed(idx, state.leaf_nodes[leaf], count)
        score = (needed, leaf_free[leaf], leaf)
        if best is None or score < best:
            best = score
        if needed == floor:
            # Candidates come in order of free GPUs, so no later leaf can beat this one.
            break
    assert best is not None
    return _fewest_nodes(state, idx, list(state.leaf_nodes[best[2]]), count)


def _adjacent_leaves(state: ClusterState, idx: ModelIndex, count: int) -> Plan:
    """The fewest consecutive leaves holding `count` free GPUs (one spine, then tightest)."""
    leaves = idx.leaves
    free = [idx.leaf_free[lf] for lf in leaves]
    n = len(leaves)
    # Two pointers: the shortest window whose free GPUs cover the request.
    width = n + 1
    total = 0
    right = 0
    for left in range(n):
        while right < n and total < count:
            total += free[right]
            right += 1
        if total < count:
            break
        width = min(width, right - left)
        total -= free[left]
    if width > n:
        raise AssertionError("caller checked that enough GPUs are free")
    spine_of = [state.leaves[lf][0] for lf in leaves]
    best: tuple[bool, int, int] | None = None
    window = sum(free[:width])
    for left in range(n - width + 1):
        if left:
            window += free[left + width - 1] - free[left - 1]
        if window >= count:
            score = (spine_of[left] != spine_of[left + width - 1], window, left)
            if best is None or score < best:
                best = score
    assert best is not None
    start = best[2]
    nodes = [node for lf in leaves[start : start + width] for node in state.leaf_nodes[lf]]
    return _fewest_nodes(state, idx, nodes, count)


def _spread(idx: ModelIndex, count: int) -> Plan:
    """One GPU per node, emptiest nodes first, alternating leaves; more rounds if needed."""
    leaf_free = idx.leaf_free
    order: list[int] = []
    for k in range(idx.max_per_node, 0, -1):
        bucket = idx.buckets[k]
        if not bucket:
            continue
        leaves = sorted(bucket, key=lambda lf: (-leaf_free[lf], lf))
        per_leaf = [sorted(bucket[lf]) for lf in leaves]
        depth = max(len(nodes) for nodes in per_leaf)
        for i in range(depth):
            order.extend(nodes[i] for nodes in per_leaf if i < len(nodes))
        if len(order) >= count:
            break
    given = dict.fromkeys(order, 0)
    remaining = count
    round_no = 0
    while remaining:
        for node in order:
            if idx.node_free[node] > round_no:
                given[node] += 1
                remaining -= 1
                if not remaining:
                    break
        round_no += 1
    return [(node, n) for node, n in given.items() if n]


@dataclass(frozen=True)
class Fragmentation:
    """How usable the free GPUs of a model are for large requests (a report: `place` keeps
    nodes and leaves whole through its tie-breaks and never reads this)."""

    free_gpus: int
    whole_free_nodes: int
    whole_free_leaves: int
    partial_nodes: int
    whole_free_node_gpus: int
    whole_free_leaf_gpus: int

    def score(self) -> float:
        """Mean of the shares of free GPUs outside whole free nodes and outside whole free
        leaves: 0 when every free GPU is in a whole free leaf, 1 when no node is whole."""
        if not self.free_gpus:
            return 0.0
        in_nodes = self.whole_free_node_gpus / self.free_gpus
        in_leaves = self.whole_free_leaf_gpus / self.free_gpus
        return 1.0 - (in_nodes + in_leaves) / 2


def fragmentation(state: ClusterState, model: str) -> Fragmentation:
    """Whole free nodes and leaves left for a model (what placement tries to keep)."""
    idx = state.model_index(model)
    if idx is None:
        return Fragmentation(0, 0, 0, 0, 0, 0)
    whole_nodes = partial = node_gpus = 0
    for free, total in zip(idx.node_free, idx.node_total, strict=True):
        if total and free == total:
            whole_nodes += 1
            node_gpus += total
        elif free:
            partial += 1
    whole = [lf for lf in idx.leaves if idx.leaf_free[lf] == idx.leaf_total[lf]]
    leaf_gpus = sum(idx.leaf_total[lf] for lf in whole)
    return Fragmentation(idx.free, whole_nodes, len(whole), partial, node_gpus, leaf_gpus)
