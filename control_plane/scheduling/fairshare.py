"""Weighted fair share on decayed usage, aging of pending requests, and token-bucket admission."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from math import exp2, inf

DEFAULT_HALF_LIFE_S = 7 * 86400.0
DEFAULT_AGING_S = 3600.0


def decay(value: float, elapsed_s: float, half_life_s: float) -> float:
    """`value` after `elapsed_s` of exponential decay (a negative elapsed time decays nothing)."""
    if half_life_s <= 0:
        raise ValueError("half_life_s must be positive")
    if elapsed_s <= 0 or value == 0:
        return value
    return value * 0.5 ** (elapsed_s / half_life_s)


@dataclass(frozen=True, slots=True)
class DecayedUsage:
    """GPU-seconds used, decayed with a half-life, as of `at`."""

    value: float = 0.0
    at: float = 0.0

    def at_time(self, now: float, half_life_s: float = DEFAULT_HALF_LIFE_S) -> float:
        elapsed = now - self.at
        if elapsed <= 0 or not self.value:
            return self.value
        return decay(self.value, elapsed, half_life_s)

    def charge(
        self, gpu_seconds: float, now: float, half_life_s: float = DEFAULT_HALF_LIFE_S
    ) -> DecayedUsage:
        """The usage after adding `gpu_seconds` at `now` (time never moves `at` backwards)."""
        if gpu_seconds < 0:
            raise ValueError("gpu_seconds must not be negative")
        when = max(now, self.at)
        return DecayedUsage(self.at_time(when, half_life_s) + gpu_seconds, when)


@dataclass(frozen=True, slots=True)
class PendingView:
    """A request waiting for GPUs, as the ordering needs it."""

    id: str
    tenant_id: str
    gpu_count: int
    submitted_at: float


def fair_share_factors(
    usage: Mapping[str, float],
    weights: Mapping[str, float],
    *,
    total_usage: float | None = None,
    total_weight: float | None = None,
) -> dict[str, float]:
    """Per tenant, 2^-(usage fraction / weight fraction), in (0, 1]: 1 for an idle tenant.

    A tenant that used exactly its weighted share scores 0.5; twice its share, 0.25. Tenants
    without a weight count with weight 1. The totals default to the sums over the tenants
    given; pass them to score only some tenants (those with pending requests) against all.
    """
    # Insertion order (not a set) keeps the sums, and so the factors, reproducible.
    tenants = dict.fromkeys(usage) | dict.fromkeys(weights)
    if not tenants:
        return {}
    weight_of = weights.get
    used_of = usage.get
    if total_weight is None:
        total_weight = sum(weight_of(t, 1.0) for t in tenants)
    if total_usage is None:
        total_usage = sum(u for u in map(used_of, tenants, repeat(0.0)) if u > 0)
    if total_usage <= 0 or total_weight <= 0:
        return dict.fromkeys(tenants, 1.0)
    scale = total_weight / total_usage
    factors: dict[str, float] = {}
    for tenant in tenants:
        weight = weight_of(tenant, 1.0)
        if weight <= 0:
            raise ValueError(f"tenant {tenant!r}: weight must be positive")
        used = used_of(tenant, 0.0)
        # 2^-(usage share / weight share), the Slurm-style fair-share factor.
        factors[tenant] = exp2(-used * scale / weight) if used > 0 else 1.0
    return factors


def priority(
    factor: float, submitted_at: float, now: float, aging_s: float = DEFAULT_AGING_S
) -> float:
    """Fair-share factor plus linear aging: one unit per `aging_s` waited.

    The factor is at most 1 and aging has no cap, so a request that has waited `aging_s`
    longer than another outranks it whatever their tenants' usage: nothing waits forever.
    """
    return factor + max(0.0, now - submitted_at) / aging_s


def order_pending(
    pending: Iterable[PendingView],
    factors: Mapping[str, float],
    now: float,
    aging_s: float = DEFAULT_AGING_S,
) -> list[PendingView]:
    """Pending requests, the one to serve first first (ties: older, then smaller id)."""
    return sorted(
        pending,
        key=lambda p: (
            -priority(factors.get(p.tenant_id, 1.0), p.submitted_at, now, aging_s),
            p.submitted_at,
            p.id,
        ),
    )


def pick_next(
    pending: Sequence[PendingView],
    factors: Mapping[str, float],
    now: float,
    aging_s: float = DEFAULT_AGING_S,
) -> PendingView | None:
    """The first of `order_pending` in one pass (no sort): what a dispatcher serves next.

    Within one tenant the oldest request always ranks first, so a caller that keeps a FIFO
    per tenant may pass only the heads of those queues.
    """
    best: PendingView | None = None
    best_prio = -inf
    inv_aging = 1.0 / aging_s
    factor_of = factors.get
    # One pass without building a key per request: this runs on every dispatch decision.
    for p in pending:
        waited = now - p.submitted_at
        prio = factor_of(p.tenant_id, 1.0) + (waited * inv_aging if waited > 0 else 0.0)
        if prio > best_prio or (
            prio == best_prio
            and best is not None
            and (p.submitted_at, p.id) < (best.submitted_at, best.id)
        ):
            best, best_prio = p, prio
    return best


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """Admission limit: `rate_per_s` tokens refill per second, at most `burst` stored."""

    rate_per_s: float
    burst: float

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.burst < 1:
            raise ValueError("rate_per_s must be positive and burst at least 1")

    def full(self, now: float) -> BucketState:
        return BucketState(self.burst, now)

    def take(self, state: BucketState | None, now: float, cost: float = 1.0) -> Admission:
        """Spend `cost` tokens if there are enough; the state returned replaces the old one."""
        if cost <= 0:
            raise ValueError("cost must be positive")
        if state is None:
            state = self.full(now)
        # A clock that goes backwards refills nothing and does not rewind the bucket.
        when = max(now, state.updated_at)
        tokens = min(self.burst, state.tokens + (when - state.updated_at) * self.rate_per_s)
        if tokens >= cost:
            return Admission(True, BucketState(tokens - cost, when), 0.0)
        wait = (cost - tokens) / self.rate_per_s if cost <= self.burst else float("inf")
        return Admission(False, BucketState(tokens, when), wait)


@dataclass(frozen=True, slots=True)
class BucketState:
    tokens: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class Admission:
    allowed: bool
    state: BucketState
    retry_after_s: float
