"""Steers the priced forecast to the idle budget from the agent's own realised idle and busy."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from math import isfinite

from predictors.budget import (
    DEFAULT_STEER,
    DEFAULT_WINDOW_S,
    BudgetController,
    SteadyController,
    make_controller,
    price_for_budget,
)
from smart_agent.outcomes import idle_minutes
from smart_agent.predlog import PredictionLog

STEER_EVERY_S = 300.0  # one controller step per this long, however often cycles run
STEADY_PERIOD_S = 3600.0  # the steady controller's periods: an hour each, as in the replay
OPEN_JOB_CAP_S = 6 * 3600.0  # a job never seen ending counts as busy this long at most
STEER_META_KEY = "idle_steer"


@dataclass(frozen=True, slots=True)
class Realised:
    """The agent's idle and busy GPU-seconds over [at - window_s, at]."""

    at: float
    window_s: float
    idle_gpu_s: float
    busy_gpu_s: float

    @property
    def ratio(self) -> float | None:
        return None if self.busy_gpu_s <= 0 else self.idle_gpu_s / self.busy_gpu_s


def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


def realised(
    log: PredictionLog,
    now: float,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    lead_s: float = 120.0,
    open_job_cap_s: float = OPEN_JOB_CAP_S,
) -> Realised:
    """Sum, within the window, the GPU-seconds the agent's holds sat idle (expired or
    cancelled unclaimed, or waiting before a claim) and the GPU-seconds its jobs ran.

    An ended hold's idle span is taken to end at its outcome and to last idle / GPUs, so only
    the part inside the window counts; a pending hold is idle from its placement until now.
    """
    lo = now - window_s
    idle = 0.0
    ended = log.query(
        "SELECT outcome_at, hold_gpus, idle_gpu_minutes FROM forecasts WHERE hold_id IS NOT "
        "NULL AND outcome IS NOT NULL AND outcome != 'pending' AND outcome_at >= ? "
        "AND idle_gpu_minutes > 0 AND hold_gpus > 0",
        (lo,),
    )
    for row in ended:
        gpus = row["hold_gpus"]
        span = row["idle_gpu_minutes"] * 60.0 / gpus
        end = row["outcome_at"]
        idle += _overlap(end - span, end, lo, now) * gpus
    for row in log.pending_holds():
        gpus = row["hold_gpus"] or 0
        if gpus <= 0:
            continue
        span = idle_minutes(row, now, lead_s) * 60.0 / gpus
        idle += _overlap(now - span, now, lo, now) * gpus
    busy = 0.0
    jobs = log.query(
        "SELECT at, ended_at, gpus FROM jobs WHERE gpus > 0 AND at <= ? "
        "AND ((ended_at IS NOT NULL AND ended_at >= ?) OR (ended_at IS NULL AND at >= ?))",
        (now, lo, lo - open_job_cap_s),
    )
    for row in jobs:
        end = row["ended_at"] if row["ended_at"] is not None else row["at"] + open_job_cap_s
        busy += _overlap(row["at"], end, lo, now) * row["gpus"]
    return Realised(at=now, window_s=window_s, idle_gpu_s=idle, busy_gpu_s=busy)


class IdleSteer:
    """Feeds a price controller the agent's realised idle and busy and sets the price of the
    priced forecasters it is given, so the price follows what was idled.

    `steer` picks the controller (predictors/budget.py): `steady` learns the one price that
    meets the budget over its window from periods of `period_s` (an hour, as in the replay),
    each spent at the price then in force; `pi` steers from the window's ratio every
    `every_s`.
    The steady controller's price and periods are saved in the prediction log at each step,
    and a restarted agent takes them back (`_since`)."""

    def __init__(
        self,
        budget: float,
        *,
        steer: str = DEFAULT_STEER,
        window_s: float | None = None,
        every_s: float = STEER_EVERY_S,
        period_s: float = STEADY_PERIOD_S,
        lead_s: float = 120.0,
        min_busy_gpu_s: float = 3600.0,
    ) -> None:
        self.budget = budget
        self.every_s = every_s
        self.period_s = period_s
        self.lead_s = lead_s
        self.controller: BudgetController | SteadyController = make_controller(
            steer,
            budget,
            price=price_for_budget(budget),
            window_s=window_s,
            min_busy_gpu_s=min_busy_gpu_s,
        )
        self.last: Realised | None = None
        # Where the steady controller's open period began (the end of its last one).
        self._period_from: float | None = None

    @property
    def price(self) -> float:
        return self.controller.price

    def step(self, log: PredictionLog, now: float, priced: Iterable[object]) -> float:
        """Measure and steer when due (the PI controller every `every_s`, the steady one as
        each period of `period_s` closes); always hand the current price to `priced`."""
        controller = self.controller
        if isinstance(controller, SteadyController):
            due = self._period_from is None or now - self._period_from >= self.period_s
        else:
            due = self.last is None or now - self.last.at >= self.every_s
        if due:
            self.last = realised(log, now, window_s=controller.window_s, lead_s=self.lead_s)
            if isinstance(controller, SteadyController):
                self._close_period(log, controller, now)
            else:
                controller.observe(
                    extra_idle_gpu_s=self.last.idle_gpu_s, busy_gpu_s=self.last.busy_gpu_s
                )
            log.set_meta(STEER_META_KEY, json.dumps(self.snapshot()))
        for member in priced:
            member.price = controller.price  # type: ignore[attr-defined]
        return controller.price

    def _close_period(self, log: PredictionLog, controller: SteadyController, now: float) -> None:
        """Give the controller the period since the last one closed (after a start: since
        the last run's, or the whole window)."""
        if self._period_from is None:
            since = self._since(log, controller, now)
        else:
            since = now - self._period_from
        period = realised(log, now, window_s=min(controller.window_s, since), lead_s=self.lead_s)
        controller.add_period(
            at=now, extra_idle_gpu_s=period.idle_gpu_s, busy_gpu_s=period.busy_gpu_s
        )
        self._period_from = now

    def _since(self, log: PredictionLog, controller: SteadyController, now: float) -> float:
        """Where the first period after a start begins: where the last run's periods ended,
        its price and periods taken back from the log (same budget and window; a clock now
        behind that end makes an empty first period); else, or if what was saved does not
        read back, the whole window as one period at the starting price."""
        try:
            saved = json.loads(log.get_meta(STEER_META_KEY) or "null")
            if (
                not isinstance(saved, dict)
                or saved.get("steer") != "steady"
                or saved.get("budget") != self.budget
                or saved.get("window_s") != controller.window_s
            ):
                return controller.window_s
            ended = float(saved["period_from"])
            if not isfinite(ended):
                return controller.window_s
            controller.resume(
                price=float(saved["price"]), periods=saved.get("periods") or [], until=ended
            )
        except (TypeError, ValueError, KeyError):
            return controller.window_s
        return max(0.0, now - ended)

    def snapshot(self) -> dict[str, object]:
        """What `jitgpu agent status` shows (the budget, what was realised, the price), and
        what a restarted agent takes back (a steady controller's periods, where they end)."""
        last = self.last
        controller = self.controller
        steady = isinstance(controller, SteadyController)
        return {
            "budget": self.budget,
            "steer": "steady" if steady else "pi",
            "at": None if last is None else last.at,
            "window_s": controller.window_s,
            "idle_gpu_hours": None if last is None else round(last.idle_gpu_s / 3600, 4),
            "busy_gpu_hours": None if last is None else round(last.busy_gpu_s / 3600, 4),
            "realised": None if last is None or last.ratio is None else round(last.ratio, 5),
            "price": controller.price,
            "period_from": self._period_from,
            "periods": [list(p) for p in controller.periods] if steady else [],
        }
