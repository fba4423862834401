"""An idle budget as the knob: an online controller that moves a price to keep idle within it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from math import exp, log

DEFAULT_BUDGET = 0.05  # idle GPU-hours per busy GPU-hour, over what reactive would idle
DEFAULT_WINDOW_S = 24 * 3600.0
DEFAULT_PRICE = 0.009  # where the controller starts: the price tuned for this budget
MIN_PRICE = 1e-6
MAX_PRICE = 100.0


# (budget, price): the fixed price of the default family whose extra idle came closest to the
# budget on the training days (Helios days 0-9, cold start 120 s; 0.018, 0.052 and 0.097
# realised); the controller starts here and moves on from what it measures.
TUNED_PRICES: tuple[tuple[float, float], ...] = ((0.02, 0.03), (0.05, 0.009), (0.1, 0.004))


def price_for_budget(budget: float) -> float:
    """A starting price for `budget`: the tuned one, interpolated in log space between the
    tuned budgets, and held at the ends (a higher budget buys more idle: a lower price)."""
    points = TUNED_PRICES
    if budget <= points[0][0]:
        return points[0][1]
    for (b0, p0), (b1, p1) in pairwise(points):
        if budget <= b1:
            share = (budget - b0) / (b1 - b0)
            return exp(log(p0) + share * (log(p1) - log(p0)))
    return points[-1][1]


@dataclass(frozen=True, slots=True)
class Totals:
    """Running totals at one time, in GPU-seconds: GPUs busy with jobs, idle (warming or
    held), and what reactive would have idled for the same jobs (their own warm-ups)."""

    at: float
    busy_gpu_s: float
    idle_gpu_s: float
    reactive_idle_gpu_s: float


class BudgetController:
    """Keeps the realised idle within `budget` over a sliding `window_s`, by moving a price.

    The measure is what an operator sets: (idle - reactive's idle) / busy GPU time, i.e. the
    idle GPU-hours spent on pre-warming per busy GPU-hour. Each `update` compares the
    window's ratio with `target` x the budget (aiming a little below leaves room for the lag:
    idle is known only after the holds a price made) and sets the price in log space, as a
    PI controller: a proportional part (`kp`) that follows the current error and an
    integral part (`ki` per update) that learns the level, both of the error relative to
    the aim, clipped to [-1, 2]. The integral is kept where the price stays within
    [`min_price`, `max_price`] (no wind-up). Before the window holds `min_busy_gpu_s` of
    work it keeps the starting price, which should come from tuning at that budget.
    """

    def __init__(
        self,
        budget: float = DEFAULT_BUDGET,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        price: float = DEFAULT_PRICE,
        kp: float = 1.0,
        ki: float = 0.1,
        target: float = 0.95,
        min_price: float = MIN_PRICE,
        max_price: float = MAX_PRICE,
        min_busy_gpu_s: float = 3600.0,
    ) -> None:
        if not budget >= 0:
            raise ValueError(f"budget must not be negative, not {budget}")
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        if not 0 < min_price <= price <= max_price:
            raise ValueError("price must lie in [min_price, max_price], both positive")
        if not (kp >= 0 and ki >= 0) or not 0 < target <= 1:
            raise ValueError("kp and ki must not be negative, and target in (0, 1]")
        self.budget = budget
        self.window_s = window_s
        self.start_price = self.price = price
        self.kp = kp
        self.ki = ki
        self.target = target
        self.min_price = min_price
        self.max_price = max_price
        self.min_busy_gpu_s = min_busy_gpu_s
        self._samples: deque[Totals] = deque()
        self._integral = 0.0
        self.updates = 0

    def ratio(self) -> float | None:
        """The window's extra idle over busy, None before it has enough work to judge."""
        if len(self._samples) < 2:
            return None
        first, last = self._samples[0], self._samples[-1]
        busy = last.busy_gpu_s - first.busy_gpu_s
        if busy < self.min_busy_gpu_s:
            return None
        extra = (last.idle_gpu_s - first.idle_gpu_s) - (
            last.reactive_idle_gpu_s - first.reactive_idle_gpu_s
        )
        return extra / busy

    def update(self, totals: Totals) -> float:
        """Record running totals and return the price to use from now on."""
        samples = self._samples
        samples.append(totals)
        while len(samples) > 2 and samples[1].at <= totals.at - self.window_s:
            samples.popleft()
        ratio = self.ratio()
        if ratio is None:
            return self.price
        return self._steer(ratio)

    def observe(self, *, extra_idle_gpu_s: float, busy_gpu_s: float) -> float:
        """Steer from a window's totals the caller measured itself (the agent sums them from
        its own records over the same sliding window) and return the price to use now."""
        if busy_gpu_s < self.min_busy_gpu_s:
            return self.price
        return self._steer(extra_idle_gpu_s / busy_gpu_s)

    def _steer(self, ratio: float) -> float:
        aim = max(self.budget * self.target, 1e-6)
        error = max(-1.0, min(2.0, (ratio - aim) / aim))
        lo, hi = log(self.min_price / self.start_price), log(self.max_price / self.start_price)
        self._integral = max(lo, min(hi, self._integral + self.ki * error))
        level = max(lo, min(hi, self._integral + self.kp * error))
        self.price = self.start_price * exp(level)
        self.updates += 1
        return self.price


class TenantBudgets:
    """One controller per tenant plus one for the whole cluster; a tenant's price is the
    higher of the two, so neither budget is exceeded to please the other."""

    def __init__(self, budget: float = DEFAULT_BUDGET, **options: float) -> None:
        self._options = options
        self.budget = budget
        self.cluster = BudgetController(budget, **options)  # type: ignore[arg-type]
        self.tenants: dict[str, BudgetController] = {}

    def for_tenant(self, tenant: str, budget: float | None = None) -> BudgetController:
        ctl = self.tenants.get(tenant)
        if ctl is None:
            chosen = self.budget if budget is None else budget
            ctl = self.tenants[tenant] = BudgetController(chosen, **self._options)  # type: ignore[arg-type]
        return ctl

    def price(self, tenant: str) -> float:
        own = self.tenants.get(tenant)
        return max(self.cluster.price, own.price if own is not None else 0.0)
