"""The predictor policies the Pareto figures sweep, their tuning grids, and what tuning chose."""

from __future__ import annotations

from sweeps import Family

# Each family sweeps one threshold for its curve; the options held fixed are tuned.
THRESHOLDS: dict[str, tuple[str, tuple[str, ...]]] = {
    # price: seconds of time-to-GPU one idle GPU-second must buy (higher: fewer, shorter holds)
    "burst": ("price", ("0.002", "0.003", "0.005", "0.008", "0.012", "0.02", "0.03", "0.05")),
    "histogram": ("tail", ("0.5", "0.6", "0.7", "0.8", "0.9")),
    "ewma": ("horizon", ("300", "600", "1200", "1800", "3600")),
    "seasonality": ("conf", ("0.2", "0.3", "0.4", "0.5", "0.6")),
    "ensemble": ("price", ("0.002", "0.004", "0.008", "0.015", "0.03")),
}

# Structural options tried on the training days (every combination, each over the sweep).
GRIDS: dict[str, dict[str, tuple[str, ...]]] = {
    "burst": {"jobs": ("1", "2", "4"), "fit": ("0", "1"), "size": ("ending", "last")},
    "histogram": {"head": ("0", "0.05"), "gaps": ("idle", "submit")},
    "ewma": {"half_life": ("600", "3600", "21600"), "jobs": ("1", "2")},
    "seasonality": {"bin": ("1800", "3600")},
    # Plus the burst member's tuned jobs, fit and size (see `ensemble_options`).
    "ensemble": {"members": ("burst+histogram+ewma", "burst+ewma", "burst+histogram")},
}

# Fewer thresholds while tuning (the whole grid runs on each); the reports use THRESHOLDS.
TUNING_THRESHOLDS: dict[str, tuple[str, ...]] = {
    "burst": ("0.002", "0.004", "0.008", "0.015", "0.03"),
    "seasonality": ("0.2", "0.3", "0.4"),
}

# What `bench/tune.py` chose on Helios days 0-9 (it prints these lines); the Pareto script
# sweeps each family with them.
TUNED: dict[str, str] = {
    "burst": "jobs=4,fit=0,size=ending",
    "histogram": "head=0.05,gaps=idle",
    "ewma": "half_life=3600,jobs=1",
    "seasonality": "bin=1800",
    "ensemble": "members=burst+ewma,jobs=4,fit=0,size=ending",
}

# The single operating point for the absolute goal (mean TTG at least 80% below reactive with
# idle/busy at most 0.05 above reactive's): the lowest time-to-GPU within that idle budget on
# the training days (`bench/tune.py` prints it too).
OPERATING_POINT = "burst:price=0.009,jobs=4,fit=0,size=ending"

# Burst forecasts alone (no keep-alive: every hold is set aside fresh, nothing is kept from an
# ending job), to show what the keep-alive component adds.
ALONE = "reuse=0,topup=1"


def combos(grid: dict[str, tuple[str, ...]]) -> list[str]:
    """Every combination of a grid's options as a spec fragment `a=1,b=x`."""
    out = [""]
    for key, values in grid.items():
        out = [f"{o},{key}={v}" if o else f"{key}={v}" for o in out for v in values]
    return out


def ensemble_options(options: str, burst_options: str) -> str:
    """The ensemble's options plus the burst member's tuned jobs, fit and size."""
    shared = [o for o in burst_options.split(",") if o.split("=")[0] in ("jobs", "fit", "size")]
    return ",".join([options, *shared]) if shared else options


def family(
    name: str, options: str, label: str | None = None, values: tuple[str, ...] = ()
) -> Family:
    """A family's sweep with fixed `options`: one spec per threshold value."""
    knob, default_values = THRESHOLDS[name]
    tail = f",{options}" if options else ""
    specs = tuple(f"{name}:{knob}={v}{tail}" for v in (values or default_values))
    return Family(label or name, specs)


# On ITP (clusters as users, 6.5 times Helios' jobs, a replay of a priced burst policy takes
# about 20 s here) the sweep keeps the prices whose idle lies near the goal's budget.
ITP_PRICES = ("0.005", "0.008", "0.012", "0.02", "0.03", "0.05")
ITP_FAMILIES = ("burst", "burst alone (no keep-alive)", "histogram", "ewma")


def tuned_families(prices: tuple[str, ...] = ()) -> list[Family]:
    """Every predictor family with its tuned options; burst forecasts alone (no keep-alive);
    and the burst predictor with its fixed window (unpriced), swept over the window. `prices`
    replaces the burst families' default sweep."""
    fams = [
        family(name, TUNED[name], values=prices if name == "burst" else ()) for name in THRESHOLDS
    ]
    alone = family("burst", f"{TUNED['burst']},{ALONE}", "burst alone (no keep-alive)", prices)
    fams.insert(1, alone)
    windows = ("300", "600", "1200", "1800", "3600")
    fixed = Family("burst, fixed window", tuple(f"burst:window={w}" for w in windows))
    fams.insert(2, fixed)
    return fams
