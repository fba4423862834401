"""Cluster state for placement: GPU slots in topology order, with incremental free counters."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[str | int, ...]:
    """Sort key under which `leaf2 < leaf10` (digit runs compare as numbers)."""
    # re.split with a capturing group alternates text and digit runs, so positions of equal
    # parity always hold the same type and tuples of two keys always compare.
    parts = _DIGITS.split(text)
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One schedulable GPU and where it sits: spine / leaf / node."""

    uuid: str
    node: str
    leaf: str
    spine: str
    model: str
    index: int = 0


class ClusterStateError(Exception):
    """A take or free that would corrupt the state."""


class DoubleAssignment(ClusterStateError):
    """A GPU asked for is already taken, or unknown."""


class NotAssigned(ClusterStateError):
    """A GPU released is not taken, or unknown."""


class ModelIndex:
    """Free counters of one GPU model, per node and per leaf (read-only outside this module).

    Node and leaf numbers are global positions in topology order. `buckets[k]` maps a leaf
    to the set of its nodes with exactly k free GPUs of this model, so a best-fit node is
    found without scanning every node.
    """

    __slots__ = (
        "buckets",
        "free",
        "leaf_free",
        "leaf_total",
        "leaves",
        "max_per_node",
        "model",
        "node_free",
        "node_gpus",
        "node_total",
        "total",
    )

    def __init__(self, model: str, n_nodes: int, n_leaves: int) -> None:
        self.model = model
        self.node_free = [0] * n_nodes
        self.node_total = [0] * n_nodes
        self.leaf_free = [0] * n_leaves
        self.leaf_total = [0] * n_leaves
        self.free = 0
        self.total = 0
        self.leaves: tuple[int, ...] = ()
        self.node_gpus: list[tuple[str, ...]] = [() for _ in range(n_nodes)]
        self.max_per_node = 0
        self.buckets: list[dict[int, set[int]]] = []

    def _move(self, node: int, leaf: int, old: int, new: int) -> None:
        bucket = self.buckets[old]
        members = bucket[leaf]
        members.discard(node)
        if not members:
            del bucket[leaf]
        self.buckets[new].setdefault(leaf, set()).add(node)


class ClusterState:
    """Which GPUs exist and which are taken; mutable, but only through take and free."""

    def __init__(self, gpus: Iterable[GpuSlot]) -> None:
        slots: dict[str, GpuSlot] = {}
        for gpu in gpus:
            if gpu.uuid in slots:
                raise ValueError(f"GPU {gpu.uuid!r} listed twice")
            slots[gpu.uuid] = gpu
        node_place: dict[str, tuple[str, str]] = {}
        for gpu in slots.values():
            where = node_place.setdefault(gpu.node, (gpu.spine, gpu.leaf))
            if where != (gpu.spine, gpu.leaf):
                raise ValueError(f"node {gpu.node!r} is reported under two leaves")
        leaf_keys = sorted(
            set(node_place.values()), key=lambda sl: (natural_key(sl[0]), natural_key(sl[1]))
        )
        leaf_pos = {key: i for i, key in enumerate(leaf_keys)}
        nodes = sorted(
            node_place,
            key=lambda n: (leaf_pos[node_place[n]], natural_key(n), n),
        )
        node_pos = {name: i for i, name in enumerate(nodes)}

        self.slots = slots
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.node_leaf: tuple[int, ...] = tuple(leaf_pos[node_place[n]] for n in nodes)
        self.leaves: tuple[tuple[str, str], ...] = tuple(leaf_keys)
        leaf_nodes: list[list[int]] = [[] for _ in leaf_keys]
        for i, leaf in enumerate(self.node_leaf):
            leaf_nodes[leaf].append(i)
        self.leaf_nodes: tuple[tuple[int, ...], ...] = tuple(tuple(ns) for ns in leaf_nodes)
        self._taken: set[str] = set()
        # uuid -> (model index, node, leaf): one lookup per GPU on every take and free.
        self._where: dict[str, tuple[ModelIndex, int, int]] = {}

        per_model: dict[str, ModelIndex] = {}
        per_node_model: dict[tuple[str, int], list[GpuSlot]] = {}
        for gpu in slots.values():
            idx = per_model.get(gpu.model)
            if idx is None:
                idx = per_model[gpu.model] = ModelIndex(gpu.model, len(nodes), len(leaf_keys))
            node = node_pos[gpu.node]
            leaf = self.node_leaf[node]
            self._where[gpu.uuid] = (idx, node, leaf)
            per_node_model.setdefault((gpu.model, node), []).append(gpu)
        for (model, node), members in per_node_model.items():
            idx = per_model[model]
            members.sort(key=lambda g: (g.index, natural_key(g.uuid), g.uuid))
            idx.node_gpus[node] = tuple(g.uuid for g in members)
            count = len(members)
            leaf = self.node_leaf[node]
            idx.node_total[node] = idx.node_free[node] = count
            idx.leaf_total[leaf] += count
            idx.leaf_free[leaf] += count
            idx.total += count
            idx.free += count
            idx.max_per_node = max(idx.max_per_node, count)
        for idx in per_model.values():
            idx.leaves = tuple(i for i, total in enumerate(idx.leaf_total) if total)
            idx.buckets = [{} for _ in range(idx.max_per_node + 1)]
            for node, count in enumerate(idx.node_total):
                if count:
                    idx.buckets[count].setdefault(self.node_leaf[node], set()).add(node)
        self._models = {m: per_model[m] for m in sorted(per_model, key=natural_key)}
        self._free_total = len(slots)

    @classmethod
    def build(cls, gpus: Iterable[GpuSlot], taken: Iterable[str] = ()) -> ClusterState:
        """A state holding `gpus`, of which `taken` are already assigned."""
        state = cls(gpus)
        state.take(taken)
        return state

    def take(self, uuids: Iterable[str]) -> None:
        """Mark GPUs taken, all or none: raises DoubleAssignment on a taken or unknown one."""
        wanted = list(uuids)
        seen: set[str] = set()
        for uuid in wanted:
            if uuid not in self._where:
                raise DoubleAssignment(f"unknown GPU {uuid!r}")
            if uuid in self._taken or uuid in seen:
                raise DoubleAssignment(f"GPU {uuid!r} is already taken")
            seen.add(uuid)
        for uuid in wanted:
            idx, node, leaf = self._where[uuid]
            old = idx.node_free[node]
            idx._move(node, leaf, old, old - 1)
            idx.node_free[node] = old - 1
            idx.leaf_free[leaf] -= 1
            idx.free -= 1
        self._taken.update(wanted)
        self._free_total -= len(wanted)

    def free(self, uuids: Iterable[str]) -> None:
        """Return GPUs to the free pool, all or none: NotAssigned on a free or unknown one."""
        released = list(uuids)
        seen: set[str] = set()
        for uuid in released:
            if uuid not in self._where:
                raise NotAssigned(f"unknown GPU {uuid!r}")
            if uuid not in self._taken or uuid in seen:
                raise NotAssigned(f"GPU {uuid!r} is not taken")
            seen.add(uuid)
        for uuid in released:
            idx, node, leaf = self._where[uuid]
            old = idx.node_free[node]
            idx._move(node, leaf, old, old + 1)
            idx.node_free[node] = old + 1
            idx.leaf_free[leaf] += 1
            idx.free += 1
        self._taken.difference_update(released)
        self._free_total += len(released)

    def is_free(self, uuid: str) -> bool:
        """True for a known GPU that nothing holds."""
        return uuid in self._where and uuid not in self._taken

    def is_known(self, uuid: str) -> bool:
        return uuid in self._where

    def free_count(self, model: str | None = None) -> int:
        """Free GPUs, of one model or of all."""
        if model is None:
            return self._free_total
        idx = self._models.get(model)
        return 0 if idx is None else idx.free

    def total_count(self, model: str | None = None) -> int:
        if model is None:
            return len(self.slots)
        idx = self._models.get(model)
        return 0 if idx is None else idx.total

    def models(self) -> tuple[str, ...]:
        """GPU models present, in natural order."""
        return tuple(self._models)

    def model_index(self, model: str) -> ModelIndex | None:
        return self._models.get(model)

    def model_indexes(self) -> tuple[ModelIndex, ...]:
        return tuple(self._models.values())

    def taken(self) -> frozenset[str]:
        return frozenset(self._taken)

    def free_gpus_on(self, idx: ModelIndex, node: int, count: int) -> list[str]:
        """The first `count` free GPUs of a model on a node, lowest index first."""
        picked: list[str] = []
        taken = self._taken
        for uuid in idx.node_gpus[node]:
            if uuid not in taken:
                picked.append(uuid)
                if len(picked) == count:
                    break
        return picked

    def copy(self) -> ClusterState:
        """An independent state with the same GPUs and the same ones taken."""
        return ClusterState.build(self.slots.values(), self._taken)


def uniform_cluster(
    gpus: int,
    gpus_per_node: int = 8,
    nodes_per_leaf: int = 4,
    leaves_per_spine: int = 32,
    model: str = "gpu",
) -> list[GpuSlot]:
    """Slots of a regular cluster of `gpus` GPUs (the last node may be partial), for replay,
    tests and benchmarks: nodes `node0..`, leaves `leaf0..`, spines `spine0..`."""
    if gpus < 1 or gpus_per_node < 1 or nodes_per_leaf < 1 or leaves_per_spine < 1:
        raise ValueError("cluster sizes must be positive")
    slots: list[GpuSlot] = []
    for i in range(gpus):
        node, index = divmod(i, gpus_per_node)
        leaf = node // nodes_per_leaf
        spine = leaf // leaves_per_spine
        name = f"node{node}"
        slots.append(
            GpuSlot(f"gpu-{node}-{index}", name, f"leaf{leaf}", f"spine{spine}", model, index)
        )
    return slots
