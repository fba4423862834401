"""`--policy session`: the session model alone, and the merge that adds it to other forecasts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from control_plane.replay.forecast import Forecaster, ForecastPolicy, flag, to_demand
from control_plane.replay.policies import Control, Policy, number, parse_options, register_policy
from predictors.session import CLUMP_GAP_S, SessionModel

SESSION_OPTIONS = ("gap", "session_jobs")


class MergedForecaster:
    """Two forecasters as one: both see every event; per user, the one asking for more GPUs
    in this round wins (their forecasts cover the same next jobs, so they must not add up)."""

    def __init__(self, first: Forecaster, second: Forecaster) -> None:
        self.first, self.second = first, second

    def observe_arrival(self, job: Any, now: float) -> None:
        for f in (self.first, self.second):
            hook = getattr(f, "observe_arrival", None)
            if hook is not None:
                hook(job, now)

    def observe_finish(self, job: Any, now: float) -> None:
        for f in (self.first, self.second):
            hook = getattr(f, "observe_finish", None)
            if hook is not None:
                hook(job, now)

    def forecast(self, now: float) -> Iterable[Any]:
        a = _by_user(self.first.forecast(now))
        b = _by_user(self.second.forecast(now))
        out = []
        for user in sorted(a.keys() | b.keys()):
            mine, theirs = a.get(user, []), b.get(user, [])
            out.extend(mine if _gpus(mine) >= _gpus(theirs) else theirs)
        return out


def _by_user(items: Iterable[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for item in items:
        demand = to_demand(item)
        grouped.setdefault(demand.user, []).append(demand)
    return grouped


def _gpus(items: list[Any]) -> int:
    return sum(d.gpus for d in items)


def session_model(options: dict[str, str]) -> SessionModel:
    """The session model from `gap=` (clump gap, s) and `session_jobs=` (most jobs warming)."""
    jobs = number(options, "session_jobs", 64, minimum=1)
    if jobs != int(jobs):
        raise ValueError("option 'session_jobs': must be a whole number")
    return SessionModel(
        clump_gap_s=number(options, "gap", CLUMP_GAP_S, minimum=1.0), max_jobs=int(jobs)
    )


def follow_cold_start(model: SessionModel, ctl: Control) -> None:
    # The pipeline keeps as many jobs warming as arrive within one warm-up: the cold start.
    model.lead_s = max(1.0, ctl.cold_start_s)


def _session(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*SESSION_OPTIONS, "reuse", "conf"))
    model = session_model(options)
    return ForecastPolicy(
        model,
        min_confidence=number(options, "conf", 0.0),
        reuse=flag(options, "reuse", True),
        topup=True,
        on_begin=lambda ctl: follow_cold_start(model, ctl),
    )


register_policy(
    "session",
    _session,
    "session model: warms a clump's next jobs as fast as the user submits them, and the "
    f"next clump where clump starts are periodic (gap={CLUMP_GAP_S:g}, session_jobs=64)",
)
