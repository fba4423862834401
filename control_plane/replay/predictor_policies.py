"""Replay policies built on the statistical predictors (burst, histogram, seasonality, ewma, ...).

`run_replay` imports this module when it exists, which registers the policies. Every spec takes
its predictor's knobs and the adapter's (`conf`, `ttl`, `tick`, `max_gpus`, `reuse`, `topup`)
as `key=value` options, for example `burst:price=0.006` or `histogram:tail=0.8,conf=0.5`.

How forecasts become holds here (`ForecastPolicy` with `reuse=1,topup=1` by default): the
predictor is asked after each arrival and finish of a user (and every `tick` seconds where
set); a forecast made as one of the user's jobs ends keeps that job's GPUs (warm) first, and
otherwise asks only for the GPUs the user does not already hold. The LLM predictor has its
own module (`llm_policy`), offered only with a model configured. Log cues are not offered:
the traces have none, so `cues` would never forecast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from control_plane.replay.forecast import ForecastPolicy, flag
from control_plane.replay.policies import Control, Policy, number, parse_options, register_policy
from predictors.base import Predictor
from predictors.burst import WEIGHTS, BurstPredictor
from predictors.ensemble import Ensemble
from predictors.ewma import EwmaPredictor
from predictors.histogram import HistogramPredictor
from predictors.history import HistoryConfig
from predictors.seasonality import SeasonalityPredictor
from predictors.stream import StreamForecaster

ADAPTER = ("conf", "ttl", "tick", "max_gpus", "reuse", "topup")
SIZES = ("last", "mode", "max")
PRICED_WINDOW_S = 6 * 3600.0  # the longest window a priced burst forecast may choose
MEMBERS = ("burst", "histogram", "ewma", "seasonality")
# The most jobs of one clump a burst forecast may cover: the history keeps k-step gaps up to
# it. More is refused, never silently cut.
MAX_CLUMP_JOBS = 16


def _choice(options: dict[str, str], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = options.get(key, default)
    if value not in allowed:
        raise ValueError(f"option {key!r}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _probability(options: dict[str, str], key: str, default: float) -> float:
    value = number(options, key, default)
    if value > 1.0:
        raise ValueError(f"option {key!r}: must be at most 1")
    return value


def _count(options: dict[str, str], key: str, default: int) -> int:
    value = number(options, key, default, minimum=1)
    if value != int(value):
        raise ValueError(f"option {key!r}: must be a whole number")
    return int(value)


def adapt(
    predictor: Predictor,
    options: dict[str, str],
    *,
    config: HistoryConfig | None = None,
    tick_s: float | None = None,
    cls: type[ForecastPolicy] = ForecastPolicy,
) -> ForecastPolicy:
    """The replay policy for a predictor: the adapter's options, a history builder, holds."""
    tick = number(options, "tick", tick_s or 60.0, minimum=1.0) if "tick" in options else tick_s
    max_gpus = options.get("max_gpus")
    jobs = _count(options, "jobs", 1) if "jobs" in options else 1
    if jobs > 1:
        # k-step gaps for every job of the clump the forecast may cover.
        config = replace(config or HistoryConfig(), max_k=max(jobs, HistoryConfig().max_k))
    forecaster = StreamForecaster(predictor, config=config, refresh_s=tick, new_only=False)
    return cls(
        forecaster,
        min_confidence=_probability(options, "conf", 0.0),
        ttl_s=number(options, "ttl", 0.0) if "ttl" in options else None,
        tick_s=tick,
        max_gpus=None if max_gpus is None else _count(options, "max_gpus", 1),
        reuse=flag(options, "reuse", True),
        topup=flag(options, "topup", True),
        on_begin=partial(_follow_cold_start, bursts_in(predictor)),
    )


def bursts_in(predictor: Predictor) -> list[BurstPredictor]:
    """The burst predictors in `predictor` (itself or an ensemble's members)."""
    members = getattr(predictor, "members", [predictor])
    return [m for m in members if isinstance(m, BurstPredictor)]


def _follow_cold_start(bursts: list[BurstPredictor], ctl: Control) -> None:
    # A warm-up lasts the cold start: that is what a hold saves and how early it must be set
    # aside. Only a lead given as an option stays as given.
    for burst in bursts:
        if getattr(burst, "lead_follows_cold_start", False):
            burst.lead_s = max(1.0, ctl.cold_start_s)


def burst_predictor(options: dict[str, str], name: str = "burst") -> BurstPredictor:
    price = options.get("price")
    default_window = PRICED_WINDOW_S if price is not None else 600.0
    jobs = _count(options, "jobs", 1)
    if jobs > MAX_CLUMP_JOBS:
        raise ValueError(f"option 'jobs': at most {MAX_CLUMP_JOBS}, not {jobs}")
    predictor = BurstPredictor(
        number(options, "window", default_window, minimum=1.0),
        max_jobs=jobs,
        size=_choice(options, "size", (*SIZES, "ending"), "ending" if price else "last"),
        price=None if price is None else number(options, "price", 0.0, minimum=1e-12),
        lead_s=number(options, "lead", 120.0, minimum=1.0),
        pool_weight=number(options, "pool", 16.0),
        # Valued as warm after a finish only where the adapter keeps the ending job's GPUs.
        warm_after_finish=flag(options, "reuse", True),
        value_fit=flag(options, "fit", True),
        weigh=_choice(options, "weigh", tuple(WEIGHTS), "jobs"),
        name=name,
    )
    # Without `lead=` the warm-up is the replay's cold start, set when the replay begins.
    predictor.lead_follows_cold_start = "lead" not in options  # type: ignore[attr-defined]
    return predictor


BURST_OPTIONS = ("window", "price", "jobs", "size", "lead", "pool", "fit", "weigh")


def _burst(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*BURST_OPTIONS, *ADAPTER))
    return adapt(burst_predictor(options), options)


def _histogram_predictor(options: dict[str, str], name: str = "histogram") -> HistogramPredictor:
    head = _probability(options, "head", 0.05)
    tail = _probability(options, "tail", 0.9)
    if tail < head:
        raise ValueError("option 'tail' must not be below 'head'")
    return HistogramPredictor(
        head,
        tail,
        margin=_probability(options, "margin", 0.1),
        min_samples=_count(options, "min_samples", 8),
        max_window_s=number(options, "max_window", 4 * 3600.0, minimum=1.0),
        fallback_window_s=number(options, "fallback", 600.0, minimum=1.0),
        gaps=_choice(options, "gaps", ("idle", "submit"), "idle"),
        size=_choice(options, "size", SIZES, "last"),
        name=name,
    )


HISTOGRAM_OPTIONS = (
    "head",
    "tail",
    "margin",
    "min_samples",
    "max_window",
    "fallback",
    "gaps",
    "size",
)


def _histogram(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*HISTOGRAM_OPTIONS, *ADAPTER))
    return adapt(_histogram_predictor(options), options)


def _season_config(options: dict[str, str]) -> HistoryConfig:
    bin_s = number(options, "bin", 3600.0, minimum=60.0)
    if bin_s != int(bin_s) or 86400 % int(bin_s):
        raise ValueError("option 'bin': must divide a day (86400 s) in whole seconds")
    return HistoryConfig(season_bin_s=int(bin_s))


def _season_predictor(options: dict[str, str], name: str = "seasonality") -> SeasonalityPredictor:
    return SeasonalityPredictor(
        number(options, "horizon", 3600.0, minimum=1.0),
        # The adapter's `conf` filters; the predictor itself should not drop anything first.
        min_confidence=0.0,
        split_weekend=flag(options, "weekend", True),
        size=_choice(options, "size", SIZES, "mode"),
        name=name,
    )


SEASON_OPTIONS = ("horizon", "bin", "weekend", "size")


def _seasonality(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*SEASON_OPTIONS, *ADAPTER))
    if "conf" not in options:
        options["conf"] = "0.3"  # the predictor's own default threshold
    # Clock bins need asking without an event: every 10 minutes unless `tick` says otherwise.
    config = _season_config(options)
    return adapt(_season_predictor(options), options, config=config, tick_s=600.0)


def _ewma_predictor(options: dict[str, str], name: str = "ewma") -> EwmaPredictor:
    half_life = number(options, "half_life", 3600.0, minimum=1.0)
    tracked = HistoryConfig().ewma_half_lives_s
    if half_life not in tracked:
        allowed = ", ".join(f"{h:g}" for h in tracked)
        raise ValueError(f"option 'half_life': must be one of {allowed} seconds")
    return EwmaPredictor(
        half_life,
        number(options, "horizon", 600.0, minimum=1.0),
        max_jobs=_count(options, "jobs", 1),
        size=_choice(options, "size", SIZES, "mode"),
        name=name,
    )


EWMA_OPTIONS = ("half_life", "horizon", "jobs", "size")


def _ewma(arg: str | None) -> Policy:
    options = parse_options(arg, allowed=(*EWMA_OPTIONS, *ADAPTER))
    return adapt(_ewma_predictor(options), options)


_MEMBER_BUILDERS: dict[str, Callable[[dict[str, str]], Predictor]] = {
    "burst": lambda o: burst_predictor(o),
    "histogram": lambda o: _histogram_predictor(o),
    "ewma": lambda o: _ewma_predictor(o),
    "seasonality": lambda o: _season_predictor(o),
}


ENSEMBLE_SHARED = (
    "price",
    "window",
    "jobs",
    "fit",
    "size",
    "lead",
    "pool",
    "weigh",
    "tail",
    "horizon",
)


def _ensemble(arg: str | None) -> Policy:
    options = parse_options(
        arg,
        allowed=("members", "mode", "min_jobs", *ENSEMBLE_SHARED, *ADAPTER),
    )
    names = options.get("members", "burst+histogram+ewma").split("+")
    unknown = [n for n in names if n not in MEMBERS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"option 'members': {'+'.join(names)!r}; use distinct {', '.join(MEMBERS)}"
        )
    # Member knobs passed through the ensemble's spec: price, window, jobs, fit, size, lead,
    # pool (burst), tail (histogram), horizon (ewma and seasonality). A knob for a member
    # that is not in the ensemble is an error, not silently dropped.
    for key, owners in _KNOB_OWNERS.items():
        if key in options and not any(o in names for o in owners):
            raise ValueError(f"option {key!r} is for {'/'.join(owners)}, not in the members")
    members = [_MEMBER_BUILDERS[n](_member_options(n, options)) for n in names]
    ensemble = Ensemble(
        members,
        mode=_choice(options, "mode", ("weighted", "select"), "weighted"),
        min_jobs=_count(options, "min_jobs", 20),
    )
    tick = 600.0 if "seasonality" in names else None
    config = HistoryConfig() if "seasonality" not in names else _season_config({})
    return adapt(ensemble, options, config=config, tick_s=tick)


_KNOB_OWNERS = {
    "price": ("burst",),
    "window": ("burst",),
    "jobs": ("burst",),
    "fit": ("burst",),
    "size": ("burst",),
    "lead": ("burst",),
    "pool": ("burst",),
    "weigh": ("burst",),
    "tail": ("histogram",),
    "horizon": ("ewma", "seasonality"),
}


def _member_options(member: str, options: dict[str, str]) -> dict[str, str]:
    keys = {
        "burst": ("price", "window", "jobs", "fit", "size", "lead", "pool", "weigh", "reuse"),
        "histogram": ("tail",),
        "ewma": ("horizon",),
        "seasonality": ("horizon",),
    }[member]
    return {k: options[k] for k in keys if k in options}


register_policy(
    "burst",
    _burst,
    "burst continuation: the user's next job soon after their latest activity "
    "(window=600, price= for a per-user window worth its idle cost, jobs=, size=, conf=)",
)
register_policy(
    "histogram",
    _histogram,
    "per-user idle-gap histogram: expect the next job between the head and tail "
    "percentiles (head=0.05, tail=0.9, margin=, fallback=, conf=)",
)
register_policy(
    "seasonality",
    _seasonality,
    "time-of-day bins the user usually works in (horizon=3600, bin=3600, conf=0.3, tick=600)",
)
register_policy(
    "ewma",
    _ewma,
    "EWMA arrival rate projected over a horizon (half_life=3600, horizon=600, jobs=, conf=)",
)
register_policy(
    "ensemble",
    _ensemble,
    "predictors weighted per user by their scored record "
    "(members=burst+histogram+ewma, mode=weighted|select, price=, conf=)",
)
