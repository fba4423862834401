"""Holds never block real demand: which holds a request preempts, and the speculative budget."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from control_plane.scheduling.cluster import ClusterState
from control_plane.scheduling.placement import PlacementRequest, place


@dataclass(frozen=True)
class HoldView:
    """An active hold as preemption needs it."""

    id: str
    tenant_id: str
    gpu_uuids: tuple[str, ...]
    confidence: float
    created_at: float


@dataclass(frozen=True)
class Preemption:
    """Holds to preempt (in preemption order) and the GPUs the request then gets."""

    hold_ids: tuple[str, ...]
    gpu_uuids: tuple[str, ...]


def preemption_order(holds: Iterable[HoldView]) -> list[HoldView]:
    """Least confident first, then youngest first (then id, so the order is total)."""
    return sorted(holds, key=lambda h: (h.confidence, -h.created_at, h.id))


def choose_preemptions(
    state: ClusterState,
    request: PlacementRequest,
    holds: Iterable[HoldView],
    *,
    below_confidence: float | None = None,
) -> Preemption | None:
    """The fewest holds, taken in preemption order, whose GPUs let `request` be placed whole.

    Holds are added least confident then youngest first until the request fits; the set is
    then trimmed, most protected first, of holds it does not need. None when even all
    candidate holds would not make room. `below_confidence` limits candidates to weaker holds
    (a hold preempting holds). The state is left as it was.
    """
    direct = place(state, request)
    if direct is not None:
        return Preemption((), tuple(direct))
    count = request.gpu_count
    wanted = request.gpu_model
    models = [wanted] if wanted is not None else list(state.models())
    slots = state.slots
    chosen: list[tuple[HoldView, list[str]]] = []
    gained = dict.fromkeys(models, 0)
    seen: set[str] = set()
    target: str | None = None
    for hold in preemption_order(holds):
        if below_confidence is not None and hold.confidence >= below_confidence:
            continue
        # Only GPUs that are really taken and not counted already can make room.
        gpus = [u for u in hold.gpu_uuids if u not in seen and state.is_known(u)]
        gpus = [u for u in gpus if not state.is_free(u)]
        useful = [u for u in gpus if slots[u].model in gained]
        if not useful:
            continue
        seen.update(gpus)
        chosen.append((hold, gpus))
        for uuid in useful:
            gained[slots[uuid].model] += 1
        target = next((m for m in models if state.free_count(m) + gained[m] >= count), None)
        if target is not None:
            break
    if target is None:
        return None
    need = count - state.free_count(target)
    kept: list[tuple[HoldView, list[str]]] = []
    have = gained[target]
    # Trim from the most protected end: drop a hold whenever the rest still make room.
    for hold, gpus in reversed(chosen):
        mine = sum(1 for u in gpus if slots[u].model == target)
        if have - mine >= need:
            have -= mine
        else:
            kept.append((hold, gpus))
    kept.reverse()
    freed = [u for _, gpus in kept for u in gpus]
    state.free(freed)
    try:
        placed = place(state, request)
    finally:
        state.take(freed)
    if placed is None:
        raise AssertionError("freeing the chosen holds must make room")
    return Preemption(tuple(h.id for h, _ in kept), tuple(placed))


@dataclass(frozen=True)
class SpeculativeBudget:
    """A tenant's limits on speculative holds."""

    max_held_gpus: int
    max_idle_gpu_hours_per_day: float | None = None


@dataclass(frozen=True)
class BudgetDecision:
    allowed: bool
    reason: str


def check_hold_budget(
    budget: SpeculativeBudget,
    held_gpus: int,
    gpu_count: int,
    *,
    idle_gpu_hours_today: float = 0.0,
) -> BudgetDecision:
    """May a tenant holding `held_gpus` in active holds open a hold of `gpu_count` more?"""
    if gpu_count < 1:
        raise ValueError("gpu_count must be at least 1")
    if held_gpus + gpu_count > budget.max_held_gpus:
        return BudgetDecision(
            False,
            f"{held_gpus} GPUs held + {gpu_count} asked would exceed the speculative budget of "
            f"{budget.max_held_gpus} held GPUs",
        )
    limit = budget.max_idle_gpu_hours_per_day
    if limit is not None and idle_gpu_hours_today >= limit:
        return BudgetDecision(
            False,
            f"{idle_gpu_hours_today:.2f} idle held GPU-hours today reach the daily limit of "
            f"{limit:g}",
        )
    return BudgetDecision(True, "within the speculative budget")
