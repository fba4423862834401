"""An idle budget as the knob: an online controller that moves a price to keep idle within it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from math import exp, isfinite, log

DEFAULT_BUDGET = 0.05  # idle GPU-hours per busy GPU-hour, over what reactive would idle
DEFAULT_WINDOW_S = 24 * 3600.0
DEFAULT_PRICE = 0.009  # where the controller starts: the price tuned for this budget
MIN_PRICE = 1e-6
MAX_PRICE = 100.0
DEFAULT_STEADY_WINDOW_S = 7 * 24 * 3600.0
DEFAULT_ELASTICITY = 1.0


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


class PriceController(ABC):
    """What steers a price to an idle budget (`BudgetController`, `SteadyController`): the
    budget, the window, the price (where it starts, its bounds), the share of the budget
    aimed at, and the work a window needs before it is judged."""

    def __init__(
        self,
        budget: float,
        *,
        window_s: float,
        price: float,
        target: float,
        min_price: float,
        max_price: float,
        min_busy_gpu_s: float,
    ) -> None:
        if not budget >= 0:
            raise ValueError(f"budget must not be negative, not {budget}")
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        if not 0 < min_price <= price <= max_price:
            raise ValueError("price must lie in [min_price, max_price], both positive")
        if not 0 < target <= 1:
            raise ValueError(f"target must be in (0, 1], not {target}")
        self.budget = budget
        self.window_s = window_s
        self.start_price = self.price = price
        self.target = target
        self.min_price = min_price
        self.max_price = max_price
        self.min_busy_gpu_s = min_busy_gpu_s
        self.updates = 0

    @abstractmethod
    def ratio(self) -> float | None:
        """The window's extra idle over busy, None before it has enough work to judge."""

    @abstractmethod
    def update(self, totals: Totals, spent_at: float | None = None) -> float:
        """Record running totals and return the price to use from now on."""


class BudgetController(PriceController):
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
        if not (kp >= 0 and ki >= 0):
            raise ValueError("kp and ki must not be negative")
        super().__init__(
            budget,
            window_s=window_s,
            price=price,
            target=target,
            min_price=min_price,
            max_price=max_price,
            min_busy_gpu_s=min_busy_gpu_s,
        )
        self.kp = kp
        self.ki = ki
        self._samples: deque[Totals] = deque()
        self._integral = 0.0

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

    def update(self, totals: Totals, spent_at: float | None = None) -> float:
        """Record running totals and return the price to use from now on (`spent_at`, the
        price actually used, matters only to a SteadyController)."""
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
    higher of the two, so neither budget is exceeded to please the other. `make` builds a
    controller for a budget (a BudgetController with `options` by default)."""

    def __init__(
        self,
        budget: float = DEFAULT_BUDGET,
        *,
        make: Callable[[float], PriceController] | None = None,
        **options: float,
    ) -> None:
        if make is not None and options:
            raise ValueError("give TenantBudgets either make= or a BudgetController's options")
        self._make = make or partial(BudgetController, **options)  # type: ignore[arg-type]
        self.budget = budget
        self.cluster = self._make(budget)
        self.tenants: dict[str, PriceController] = {}

    def for_tenant(self, tenant: str, budget: float | None = None) -> PriceController:
        ctl = self.tenants.get(tenant)
        if ctl is None:
            chosen = self.budget if budget is None else budget
            ctl = self.tenants[tenant] = self._make(chosen)
        return ctl

    def price(self, tenant: str) -> float:
        own = self.tenants.get(tenant)
        return max(self.cluster.price, own.price if own is not None else 0.0)


class SteadyController(PriceController):
    """Keeps the realised idle within `budget` by estimating the one steady price that would
    have met it over the sliding `window_s`, instead of steering each window to it.

    A controller that holds every window to the budget pays a high price on quiet days and a
    low one on busy days; one steady price spends the same idle where it saves most (on
    Helios the PI controller above cost 15% per job against it). Each period's extra idle is
    taken to answer to price as a power law, idle ~ price ** -`elasticity`: idle spent at
    price p would have been idle x (p / q) ** e at price q. So the steady price meeting
    `target` x the budget over the window has a closed form from the periods' extra idle,
    busy time and the price each ran at. Past excess is not repaid: the estimate learns the
    level, and each period after runs at it. A price moves at most `max_step` times per
    update, so one odd period cannot swing it, and stays within [`min_price`, `max_price`].
    """

    def __init__(
        self,
        budget: float = DEFAULT_BUDGET,
        *,
        window_s: float = DEFAULT_STEADY_WINDOW_S,
        price: float = DEFAULT_PRICE,
        elasticity: float = DEFAULT_ELASTICITY,
        max_step: float = 2.0,
        target: float = 0.95,
        min_price: float = MIN_PRICE,
        max_price: float = MAX_PRICE,
        min_busy_gpu_s: float = 3600.0,
    ) -> None:
        if not elasticity > 0 or not max_step > 1:
            raise ValueError("elasticity must be positive, and max_step above 1")
        super().__init__(
            budget,
            window_s=window_s,
            price=price,
            target=target,
            min_price=min_price,
            max_price=max_price,
            min_busy_gpu_s=min_busy_gpu_s,
        )
        self.elasticity = elasticity
        self.max_step = max_step
        # (end, extra idle, busy, price in force): one per period, within the window.
        self._periods: deque[tuple[float, float, float, float]] = deque()
        self._last: Totals | None = None

    @property
    def periods(self) -> tuple[tuple[float, float, float, float], ...]:
        """The window's periods: (end, extra idle, busy, the price in force), oldest first."""
        return tuple(self._periods)

    def resume(self, *, price: float, periods: list[list[float]], until: float) -> None:
        """Take back a price and the periods (as `periods` gave them) of an earlier run whose
        last period ended at `until`; a price out of bounds, a period not finite, with
        negative busy time or none of a positive price, or one ending after `until`, is
        refused (ValueError) and nothing is taken."""
        if not self.min_price <= price <= self.max_price:
            raise ValueError(f"price {price} is outside [{self.min_price}, {self.max_price}]")
        taken = []
        for period in periods:
            values = tuple(float(v) for v in period)
            if len(values) != 4 or not all(isfinite(v) for v in values):
                raise ValueError(f"not a period: {period!r}")
            end, _, busy, spent_at = values
            if busy < 0 or spent_at <= 0 or end > until:
                raise ValueError(f"not a period: {period!r}")
            taken.append(values)
        self.price = price
        self._periods = deque(sorted(taken))  # type: ignore[arg-type]

    def ratio(self) -> float | None:
        """The window's extra idle over busy, None before it has enough work to judge."""
        busy = sum(p[2] for p in self._periods)
        if busy < self.min_busy_gpu_s:
            return None
        return sum(p[1] for p in self._periods) / busy

    def update(self, totals: Totals, spent_at: float | None = None) -> float:
        """Record running totals and return the price to use from now on."""
        last, self._last = self._last, totals
        if last is None:
            return self.price
        extra = (totals.idle_gpu_s - last.idle_gpu_s) - (
            totals.reactive_idle_gpu_s - last.reactive_idle_gpu_s
        )
        return self.add_period(
            at=totals.at,
            extra_idle_gpu_s=extra,
            busy_gpu_s=totals.busy_gpu_s - last.busy_gpu_s,
            spent_at=spent_at,
        )

    def add_period(
        self,
        *,
        at: float,
        extra_idle_gpu_s: float,
        busy_gpu_s: float,
        spent_at: float | None = None,
    ) -> float:
        """One period's extra idle and busy GPU-seconds, ending at `at`, spent at the price in
        force (or `spent_at`, where the price used was another: a tenant pays the higher of
        its own and the cluster's); returns the price to use from now on."""
        periods = self._periods
        used = self.price if spent_at is None else spent_at
        periods.append((at, extra_idle_gpu_s, busy_gpu_s, used))
        while periods and periods[0][0] <= at - self.window_s:
            periods.popleft()
        busy = sum(p[2] for p in periods)
        if busy < self.min_busy_gpu_s:
            return self.price
        e = self.elasticity
        weighted = sum(extra * price**e for _, extra, _, price in periods)
        allowed = self.target * self.budget * busy
        if weighted <= 0 or allowed <= 0:
            wanted = self.min_price if weighted <= 0 else self.max_price
        else:
            wanted = (weighted / allowed) ** (1.0 / e)
        step = self.max_step
        wanted = max(self.price / step, min(self.price * step, wanted))
        self.price = max(self.min_price, min(self.max_price, wanted))
        self.updates += 1
        return self.price


STEERS = ("steady", "pi")
DEFAULT_STEER = "steady"


def make_controller(
    steer: str,
    budget: float,
    *,
    price: float,
    window_s: float | None = None,
    **options: float,
) -> BudgetController | SteadyController:
    """The controller `steer` names (see STEERS) for `budget`, starting at `price`, over its
    own default window unless `window_s` is given; `options` are that controller's."""
    if steer == "steady":
        window = DEFAULT_STEADY_WINDOW_S if window_s is None else window_s
        return SteadyController(budget, window_s=window, price=price, **options)
    if steer == "pi":
        window = DEFAULT_WINDOW_S if window_s is None else window_s
        return BudgetController(budget, window_s=window, price=price, **options)
    raise ValueError(f"steer must be one of {', '.join(STEERS)}, not {steer!r}")
