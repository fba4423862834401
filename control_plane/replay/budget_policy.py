"""`--policy default`: the agent's default forecast family, its price steered by an idle budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from control_plane.replay.forecast import Forecaster, ForecastPolicy, flag
from control_plane.replay.policies import (
    Control,
    Policy,
    number,
    parse_options,
    register_policy,
)
from control_plane.replay.predictor_policies import (
    ADAPTER,
    BURST_OPTIONS,
    MAX_CLUMP_JOBS,
    adapt,
    burst_predictor,
    bursts_in,
)
from control_plane.replay.session_policy import (
    SESSION_OPTIONS,
    MergedForecaster,
    follow_cold_start,
    session_model,
)
from control_plane.replay.trace import Job
from predictors.budget import (
    DEFAULT_BUDGET,
    DEFAULT_ELASTICITY,
    DEFAULT_PRICE,
    DEFAULT_STEADY_WINDOW_S,
    DEFAULT_STEER,
    DEFAULT_WINDOW_S,
    MAX_PRICE,
    MIN_PRICE,
    STEERS,
    BudgetController,
    PriceController,
    TenantBudgets,
    make_controller,
)
from predictors.burst import WEIGHTS, BurstPredictor
from predictors.reserve import WarmReserve

# The default family and its structure (tuned on Helios days 0-9): the priced burst forecast
# covering up to four jobs of a clump, the window valued without the size fit, holds sized
# like the ending job. Its price is not an option: the budget controller sets it.
DEFAULT_OPTIONS = {"jobs": "4", "fit": "0", "size": "ending"}
DEFAULT_PERIOD_S = 3600.0  # how often the controller looks at the window
DEFAULT_KP, DEFAULT_KI = 1.0, 0.1  # the controller's gains (predictors/budget.py)
# The options `default` takes for itself; the rest (and `price`, where the forecast starts)
# go to the burst forecast.
_OWN_OPTIONS = (
    "budget",
    "window",
    "period",
    "kp",
    "ki",
    "steer",
    "elasticity",
    "session",
    "reserve",
    "tenants",
)
DEFAULT_SESSION = False  # the session model beside the burst forecast (session=1)
# An adaptive warm reserve per active user (reserve=1). Off: it helps where users submit
# steadily (ITP) but costs a few percent on Helios and Alibaba (docs/prewarm-results.md).
DEFAULT_RESERVE = False


class BudgetedPolicy(ForecastPolicy):
    """A priced forecast policy whose price follows a BudgetController (cluster-wide)."""

    def __init__(self, forecaster: Forecaster, **options: Any) -> None:
        super().__init__(forecaster, **options)
        self.budget: PriceController = BudgetController()
        self.period_s = DEFAULT_PERIOD_S
        self._bursts: list[BurstPredictor] = []
        self._next_update = 0.0
        # With a controller per tenant (users of the trace): theirs beside the cluster's.
        self.tenants: TenantBudgets | None = None
        self._users: set[str] = set()
        self._user_prices: dict[str, float] = {}  # each user's price since the last update
        # A warm reserve per active user beside the forecast, priced like it.
        self.reserve: WarmReserve | None = None

    def steer(self, budget: PriceController, period_s: float, bursts: list[BurstPredictor]) -> None:
        """Let `budget` set the price of `bursts` every `period_s` seconds."""
        self.budget, self.period_s, self._bursts = budget, period_s, bursts

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        super().begin(jobs, ctl)
        self._next_update = jobs[0].submit + self.period_s if jobs else 0.0
        if self.reserve is not None:
            self.reserve.lead_s = max(1.0, ctl.cold_start_s)
        self._set_price(self.budget.price)

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        self._users.add(job.user)
        self._maybe_update(now, ctl)
        super().on_arrival(job, now, ctl)
        reserve = self.reserve
        if reserve is None:
            return
        reserve.observe_arrival(job.user, now, job.gpus)
        reserve.note_forecast(job.user, now, self.wanted.get(job.user, 0))
        plan = reserve.plan(job.user, now)
        if plan is None:
            return
        gpus, until = plan
        # The reserve is a floor under what the forecast holds: keep that many of the user's
        # GPUs until the window ends, and set aside (warming now) what is missing.
        ctl.keep(job.user, gpus, until)
        short = gpus - ctl.held_gpus(job.user)
        if short > 0:
            ctl.hold(job.user, short, now, until - now)

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        self._maybe_update(now, ctl)
        super().on_finish(job, now, ctl)
        reserve = self.reserve
        if reserve is None:
            return
        reserve.note_forecast(job.user, now, self.wanted.get(job.user, 0), warm=self.reuse)
        plan = reserve.plan(job.user, now)
        if plan is None:
            return
        gpus, until = plan
        short = gpus - ctl.held_gpus(job.user)
        if short > 0:
            # The ending job's GPUs are warm already: they refill the reserve for free.
            ctl.retain(job, short, until - now)

    def _maybe_update(self, now: float, ctl: Control) -> None:
        if now < self._next_update:
            return
        self._next_update = now + self.period_s
        # What each user paid in the period now ending (a user new to it, the cluster's price).
        spent = {user: self._user_prices.get(user, self.budget.price) for user in self._users}
        self._set_price(self.budget.update(ctl.totals()))
        tenants = self.tenants
        if tenants is None:
            return
        for user in self._users:
            # Spent at the price the user was given, not at its own controller's.
            tenants.for_tenant(user).update(ctl.user_totals(user), spent_at=spent[user])
        # A user's price is the higher of its own and the cluster's: neither budget is
        # exceeded to please the other.
        prices = {user: tenants.price(user) for user in self._users}
        self._user_prices = prices
        for burst in self._bursts:
            burst.user_prices = prices
        if self.reserve is not None:
            self.reserve.user_prices = prices

    def _set_price(self, price: float) -> None:
        for burst in self._bursts:
            burst.price = price
        if self.reserve is not None:
            self.reserve.price = price

    def adopt(self, trained: Policy) -> None:
        # The price the controller reached on the training days is where it starts here.
        if isinstance(trained, BudgetedPolicy):
            self.budget.start_price = self.budget.price = trained.budget.price
            if self.tenants is not None and trained.tenants is not None:
                for user, learnt in trained.tenants.tenants.items():
                    mine = self.tenants.for_tenant(user)
                    mine.start_price = mine.price = learnt.price

    def report(self) -> dict[str, object]:
        """Figures the replay adds to this policy's result."""
        out: dict[str, object] = {
            "idle_budget": self.budget.budget,
            "final_price": round(self.budget.price, 6),
            "price_updates": self.budget.updates,
        }
        if self.tenants is not None:
            out.update(tenant_report(self.tenants))
        return out


def tenant_report(tenants: TenantBudgets) -> dict[str, object]:
    """Per-tenant control at the end: how many were judged, how many were over budget in
    their last window, and the spread of their prices."""
    ratios = {u: c.ratio() for u, c in tenants.tenants.items()}
    judged = {u: r for u, r in ratios.items() if r is not None}
    prices = sorted(tenants.price(u) for u in tenants.tenants)
    return {
        "tenant_controllers": len(tenants.tenants),
        "tenants_judged": len(judged),
        "tenants_over_budget": sum(r > tenants.budget for r in judged.values()),
        "tenant_price_min": round(prices[0], 6) if prices else None,
        "tenant_price_max": round(prices[-1], 6) if prices else None,
    }


def _default(arg: str | None) -> Policy:
    options = parse_options(
        arg,
        allowed=("price", *_OWN_OPTIONS, *SESSION_OPTIONS, *BURST_OPTIONS, *ADAPTER),
    )
    session = flag(options, "session", DEFAULT_SESSION)
    if not session and any(k in options for k in SESSION_OPTIONS):
        raise ValueError("options gap= and session_jobs= need session=1")
    model = session_model(options) if session else None
    budget = number(options, "budget", DEFAULT_BUDGET)
    start = number(options, "price", DEFAULT_PRICE, minimum=MIN_PRICE)
    period = number(options, "period", DEFAULT_PERIOD_S, minimum=1.0)
    burst_options = {**DEFAULT_OPTIONS, **options, "price": str(start)}
    for key in (*_OWN_OPTIONS, *SESSION_OPTIONS):
        burst_options.pop(key, None)
    predictor = burst_predictor(burst_options)
    policy = adapt(predictor, burst_options, cls=BudgetedPolicy)
    assert isinstance(policy, BudgetedPolicy)
    if model is not None:
        # The session model's clump pipeline and cadence beside the burst forecast.
        policy.forecaster = MergedForecaster(policy.forecaster, model)
        policy.rebind()
        follow = policy.on_begin

        def begin(ctl: Control) -> None:
            if follow is not None:
                follow(ctl)
            follow_cold_start(model, ctl)

        policy.on_begin = begin
    price = min(start, MAX_PRICE)
    make = _controllers(options, price=price)
    controller = make(budget)
    if flag(options, "tenants", False):
        policy.tenants = TenantBudgets(budget, make=make)
        controller = policy.tenants.cluster
    policy.steer(controller, period, bursts_in(predictor))
    if flag(options, "reserve", DEFAULT_RESERVE):
        policy.reserve = WarmReserve(price=price, weigh=WEIGHTS[predictor.weigh])
    return policy


def _controllers(options: dict[str, str], *, price: float) -> Callable[[float], PriceController]:
    """How the price follows the budget (`steer=`): a controller for a given budget, starting
    at `price`. `steady` estimates the one steady price that meets the budget over a week
    (`elasticity=`: how idle answers to price); `pi` holds each day's idle to the budget
    (`kp=`, `ki=`). Options of the other kind are refused, not ignored."""
    steer = options.get("steer", DEFAULT_STEER)
    if steer not in STEERS:
        raise ValueError(f"option 'steer': {steer!r} is not one of {', '.join(STEERS)}")
    foreign = ("kp", "ki") if steer == "steady" else ("elasticity",)
    given = [key for key in foreign if key in options]
    if given:
        raise ValueError(f"option {given[0]!r} does not apply to steer={steer}")
    window = None if "window" not in options else number(options, "window", 0.0, minimum=60.0)
    if steer == "steady":
        own = {"elasticity": number(options, "elasticity", DEFAULT_ELASTICITY, minimum=0.01)}
    else:
        own = {
            "kp": number(options, "kp", DEFAULT_KP, minimum=0.0),
            "ki": number(options, "ki", DEFAULT_KI, minimum=0.0),
        }
    return partial(make_controller, steer, price=price, window_s=window, **own)


register_policy(
    "default",
    _default,
    "the agent's default: priced burst (jobs=4, size=ending) with its price steered to keep "
    f"idle within budget= (default {DEFAULT_BUDGET:g}) by steer={'|'.join(STEERS)} (default "
    f"{DEFAULT_STEER}: one steady price over window= {DEFAULT_STEADY_WINDOW_S:g} s, "
    f"elasticity=; pi: each window= {DEFAULT_WINDOW_S:g} s, kp=, ki=; jobs up to "
    f"{MAX_CLUMP_JOBS}); tenants=1 adds a controller per user of the trace",
)
