"""Adapter that turns a demand forecaster into a replay policy (holds from forecasts)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from control_plane.replay.policies import Control, Policy, number, parse_options, register_policy
from control_plane.replay.trace import Job

DEFAULT_TTL_S = 600.0
ADAPTER_OPTIONS = ("conf", "ttl", "tick", "max_gpus", "reuse", "topup")


@dataclass(frozen=True, slots=True)
class Demand:
    """`user` will need `gpus` GPUs at `at` (virtual seconds) with `confidence`."""

    user: str
    gpus: int
    at: float
    confidence: float = 1.0
    ttl_s: float | None = None


class Forecaster(Protocol):
    """What the adapter needs. Optional hooks `observe_arrival(job, now)` and
    `observe_finish(job, now)` are called when present; `job` has `job_id`, `user`,
    `submit`, `gpus` and `duration`."""

    def forecast(self, now: float) -> Iterable[Any]: ...


def to_demand(item: Any) -> Demand:
    """A Demand from any forecast object with user/tenant, gpus/gpu_count, at/start_at."""
    if isinstance(item, Demand):
        return item
    # Chosen once per item: this runs for every forecast of a replay.
    get = item.get if isinstance(item, Mapping) else partial(getattr, item)
    user = _first(get, item, ("user", "tenant", "tenant_id"))
    gpus = _first(get, item, ("gpus", "gpu_count", "num_gpus"))
    at = _first(get, item, ("at", "start_at", "time"))
    if isinstance(at, datetime):
        at = at.timestamp()
    confidence = get("confidence", None)
    ttl = get("ttl_s", None)
    return Demand(
        str(user),
        int(gpus),
        float(at),
        1.0 if confidence is None else float(confidence),
        None if ttl is None else float(ttl),
    )


def _first(get: Callable[[str, Any], Any], item: Any, names: Sequence[str]) -> Any:
    for name in names:
        value = get(name, None)
        if value is not None:
            return value
    raise ValueError(f"forecast {item!r} has none of {', '.join(names)}")


class ForecastPolicy(Policy):
    """Asks the forecaster after every arrival and finish (and every `tick_s` if set) and
    holds GPUs for each forecast with confidence >= `min_confidence`, claimable for `ttl_s`
    after its time. Without `ttl_s` a forecast's own `ttl_s` (its window) is used, else
    DEFAULT_TTL_S. A forecast repeated for the same user and time only adds the GPUs not yet
    asked for. `min_confidence` and `ttl_s` are the knobs to sweep for a Pareto curve of
    time-to-GPU against idle GPU-hours.

    `reuse`: a forecast made as a job of its user ends, due within a cold start, is served
    first from that job's GPUs (kept, already warm), the rest by a new hold. This is how a
    forecast drives keep-alive: a finished job's GPUs stay only where demand is forecast.
    `topup`: instead of remembering what was asked per forecast time, a forecast asks only for
    the GPUs its user does not hold already (set aside or asked for), so forecasts repeated
    at every event never stack up.
    """

    def __init__(
        self,
        forecaster: Forecaster,
        *,
        min_confidence: float = 0.0,
        ttl_s: float | None = None,
        tick_s: float | None = None,
        max_gpus: int | None = None,
        reuse: bool = False,
        topup: bool = False,
        on_begin: Callable[[Control], None] | None = None,
    ) -> None:
        self.forecaster = forecaster
        self.on_begin = on_begin
        self.min_confidence = min_confidence
        self.ttl_s = ttl_s
        self.tick_s = tick_s
        self.max_gpus = max_gpus
        self.reuse = reuse
        self.topup = topup
        self._asked: dict[tuple[str, float], int] = {}
        # GPUs the latest round of forecasts asked for, per user (what they mean to hold).
        self.wanted: dict[str, int] = {}
        self.rebind()

    def rebind(self) -> None:
        """Look up the forecaster's optional hooks again (after replacing `forecaster`)."""
        self._on_arrival = getattr(self.forecaster, "observe_arrival", None)
        self._on_finish = getattr(self.forecaster, "observe_finish", None)

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        # Settings that follow the simulated cluster (a lead that follows the cold start).
        if self.on_begin is not None:
            self.on_begin(ctl)

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        if self._on_arrival is not None:
            self._on_arrival(job, now)
        self._act(now, ctl)

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        if self._on_finish is not None:
            self._on_finish(job, now)
        self._act(now, ctl, job if self.reuse else None)

    def on_tick(self, now: float, ctl: Control) -> None:
        self._act(now, ctl)

    def _act(self, now: float, ctl: Control, ending: Job | None = None) -> None:
        wanted: dict[str, int] = {}
        held: dict[str, int] = {}  # what each user holds, read once per call and kept current
        for item in self.forecaster.forecast(now):
            demand = to_demand(item)
            if demand.confidence < self.min_confidence or demand.gpus < 1:
                continue
            gpus = demand.gpus if self.max_gpus is None else min(demand.gpus, self.max_gpus)
            ttl = self.ttl_s if self.ttl_s is not None else demand.ttl_s
            if ttl is None:
                ttl = DEFAULT_TTL_S
            user, until = demand.user, demand.at + ttl
            wanted[user] = wanted.get(user, 0) + gpus
            kept = 0
            if (
                ending is not None
                and ending.user == user
                and demand.at - now <= ctl.cold_start_s
                and until > now
            ):
                # Kept GPUs are warm now; new ones would cost a whole warm-up.
                kept = ctl.retain(ending, gpus, until - now, demand.confidence)
            if self.topup:
                # One user's forecasts in one batch add up (the next job, the one after...).
                if user not in held:
                    held[user] = ctl.held_gpus(user)
                else:
                    held[user] += kept
                more = wanted[user] - held[user]
                if more > 0:
                    held[user] += more
            else:
                key = (user, demand.at)
                more = gpus - kept - self._asked.get(key, 0)
                if more > 0 or kept:
                    self._asked[key] = gpus
            if more > 0:
                ctl.hold(user, more, demand.at, ttl, demand.confidence)
        self.wanted = wanted
        if len(self._asked) > 4096:
            # Forget forecasts whose time is long past; they can no longer repeat usefully.
            horizon = now - 2 * (self.ttl_s or DEFAULT_TTL_S)
            self._asked = {k: v for k, v in self._asked.items() if k[1] >= horizon}


ForecasterFactory = Callable[[dict[str, str]], Forecaster]


def register_forecaster(name: str, factory: ForecasterFactory, summary: str = "") -> None:
    """Register policy `name[:conf=C,ttl=S,tick=S,max_gpus=N,...]` built on a forecaster.

    The adapter takes conf, ttl, tick and max_gpus; every other `key=value` goes to
    `factory` as a string.
    """

    def build(arg: str | None) -> Policy:
        raw = parse_options(arg, allowed=_anything(arg))
        options = {k: v for k, v in raw.items() if k in ADAPTER_OPTIONS}
        rest = {k: v for k, v in raw.items() if k not in ADAPTER_OPTIONS}
        tick = options.get("tick")
        max_gpus = options.get("max_gpus")
        return ForecastPolicy(
            factory(rest),
            min_confidence=number(options, "conf", 0.0),
            ttl_s=None if "ttl" not in options else number(options, "ttl", DEFAULT_TTL_S),
            tick_s=None if tick is None else number(options, "tick", 60.0, minimum=1.0),
            max_gpus=None if max_gpus is None else int(number(options, "max_gpus", 1, minimum=1)),
            reuse=flag(options, "reuse", False),
            topup=flag(options, "topup", False),
        )

    register_policy(
        name,
        build,
        summary or f"forecaster {name} (conf=, ttl=, tick=, max_gpus=, reuse=, topup=)",
    )


def flag(options: dict[str, str], key: str, default: bool) -> bool:
    """A yes/no option: 1/0, true/false, yes/no."""
    raw = options.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ValueError(f"option {key!r}: {raw!r} is not 0/1 (or true/false, yes/no)")


def _anything(arg: str | None) -> tuple[str, ...]:
    # Forecaster options are not known here: accept every key=value key given.
    if not arg:
        return ()
    return tuple(part.partition("=")[0].strip() for part in arg.split(",") if "=" in part)


def sweep(name: str, key: str, values: Iterable[float | int | str], extra: str = "") -> list[str]:
    """Policy specs sweeping one option: sweep("p", "conf", [0.2, 0.5]) -> p:conf=0.2, ..."""
    tail = f",{extra}" if extra else ""
    return [f"{name}:{key}={value}{tail}" for value in values]
