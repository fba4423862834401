"""Tune the predictor policies on Helios days 0-9, then report them on days 10-19 (no peeking).

    .venv/bin/python bench/tune.py [--trace FILE] [--workers 2] [--families burst,ewma]

The trace is split by submit time: a job belongs to the day it was submitted. A job submitted
before the boundary that runs past it runs to its end in the training replay (the trace gives
its duration) and is absent from the test replay; the test replay starts with an empty cluster
and predictors with no history, exactly like every baseline it is compared with. Tuning sees
only training jobs: for each predictor family it tries every combination of its structural
options (`candidates.GRIDS`) over the family's threshold sweep, and keeps the one whose curve
lies furthest below keep-alive's at equal idle GPU-hours. The absolute operating point is the
lowest time-to-GPU on the training days within the idle budget (idle/busy at most 0.05 above
reactive's). Then the chosen policies run once on the test days. Prints Markdown.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from candidates import (
    GRIDS,
    OPERATING_POINT,
    THRESHOLDS,
    TUNING_THRESHOLDS,
    combos,
    ensemble_options,
    family,
)
from machine import describe
from sweeps import (
    Result,
    RunFn,
    at_idle,
    curve,
    gain,
    hybrid_family,
    keepalive_family,
    markdown_table,
    miss_table,
    run_specs,
    window,
)

from control_plane.replay.engine import SimConfig
from control_plane.replay.trace import Job, load_trace, shared_trace

HELIOS = "helios_venus_2020-05-28_20d.csv"
BOUNDARY_DAY = 10
IDLE_MARGIN = 0.05  # idle/busy may exceed reactive's by this much
TTG_CUT = 0.80  # mean time-to-GPU at least this much below reactive's
REL_CUT = 0.20  # and this much below keep-alive and the hybrid histogram at equal idle
FINE_PRICES = ("0.004", "0.005", "0.006", "0.007", "0.008", "0.009", "0.01", "0.012", "0.015")


def split_jobs(
    jobs: Sequence[Job], boundary_day: float = BOUNDARY_DAY
) -> tuple[list[Job], list[Job]]:
    """(training, test) jobs: submitted before the boundary, and from it on."""
    return window(jobs, 0.0, boundary_day), window(jobs, boundary_day, float("inf"))


def score(results: Sequence[Result], keepalive: Sequence[tuple[float, float]]) -> float:
    """Mean of how much lower each point's time-to-GPU is than keep-alive's at the same idle
    GPU-hours, over the points inside keep-alive's swept range (-1 when none is)."""
    gains = [
        g
        for r in results
        if (
            g := gain(
                float(r["mean_time_to_gpu_s"]), at_idle(keepalive, float(r["idle_gpu_hours"]))
            )
        )
        is not None
    ]
    return sum(gains) / len(gains) if gains else -1.0


class Runner:
    """Runs each spec at most once per job list within one invocation (in parallel), and
    hands back the remembered result after that; nothing is kept between invocations."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.done: dict[tuple[int, str], Result] = {}

    def __call__(self, jobs: Sequence[Job], specs: Sequence[str], cfg: SimConfig) -> list[Result]:
        key = id(jobs)
        todo = [s for s in dict.fromkeys(specs) if (key, s) not in self.done]
        for spec, result in zip(todo, run_specs(jobs, todo, cfg, self.workers), strict=True):
            self.done[(key, spec)] = result
        return [self.done[(key, s)] for s in specs]


def tune(
    train: Sequence[Job],
    config: SimConfig,
    families: Sequence[str],
    run: RunFn = run_specs,
) -> tuple[dict[str, tuple[str, float]], list[str]]:
    """For each family, the structural options that score best on `train`, with the score;
    and the lines of a Markdown report of every combination tried. The ensemble goes last:
    its burst member takes the burst family's choice."""
    keepalive = curve(run(train, keepalive_family().specs, config))
    chosen: dict[str, tuple[str, float]] = {}
    report = ["| family | options | mean gain vs keep-alive (train) |", "|---|---|---:|"]
    ordered = [n for n in families if n != "ensemble"]
    for batch in (ordered, [n for n in families if n == "ensemble"]):
        plans = []
        for name in batch:
            for options in combos(GRIDS[name]):
                if name == "ensemble" and "burst" in chosen:
                    options = ensemble_options(options, chosen["burst"][0])
                values = TUNING_THRESHOLDS.get(name, ())
                plans.append((name, options, family(name, options, values=values).specs))
        # One call for the whole batch, so that every worker stays busy.
        flat = [spec for _, _, specs in plans for spec in specs]
        results = dict(zip(flat, run(train, flat, config), strict=True))
        for name, options, specs in plans:
            value = score([results[s] for s in specs], keepalive)
            report.append(f"| {name} | `{options}` | {value:+.1%} |")
            if name not in chosen or value > chosen[name][1]:
                chosen[name] = (options, value)
    return chosen, report


def operating_point(
    train: Sequence[Job], config: SimConfig, options: str, run: RunFn = run_specs
) -> tuple[str, Result | None]:
    """The priced burst spec with the lowest training time-to-GPU within the idle budget."""
    reactive = run(train, ["reactive"], config)[0]
    budget = float(reactive["idle_ratio"]) + IDLE_MARGIN
    specs = [f"burst:price={p},{options}" for p in FINE_PRICES]
    fits = [r for r in run(train, specs, config) if float(r["idle_ratio"]) <= budget]
    if not fits:
        return OPERATING_POINT, None
    best = min(fits, key=lambda r: float(r["mean_time_to_gpu_s"]))
    return str(best["policy"]), best


def _report(
    title: str, jobs: Sequence[Job], specs: Sequence[str], config: SimConfig, run: RunFn
) -> list[Result]:
    ka_specs, hh_specs = keepalive_family().specs, hybrid_family().specs
    # One call, so that every worker stays busy.
    everything = run(jobs, ["reactive", "oracle", *ka_specs, *hh_specs, *specs], config)
    base, rest = everything[:2], everything[2:]
    ka, rest = rest[: len(ka_specs)], rest[len(ka_specs) :]
    hh, results = rest[: len(hh_specs)], rest[len(hh_specs) :]
    print(f"\n### {title}: {len(jobs):,} jobs\n")
    print(markdown_table([*base, *results], curve(ka), curve(hh)))
    return [*base, *results, *ka, *hh]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=shared_trace(HELIOS))
    parser.add_argument("--capacity", type=int, default=968)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--families", default=",".join(THRESHOLDS))
    args = parser.parse_args()
    if args.trace is None:
        parser.error(f"--trace is needed: ../shared/traces/{HELIOS} is not beside the repository")
    began = time.perf_counter()
    print(f"machine: {describe()}\n")
    config = SimConfig(capacity=args.capacity, gpus_per_node=8, cold_start_s=120.0)
    train, test = split_jobs(load_trace(args.trace))
    print(
        f"{args.trace.name}: train = days 0-{BOUNDARY_DAY - 1} ({len(train):,} jobs), "
        f"test = days {BOUNDARY_DAY}-19 ({len(test):,} jobs), capacity {args.capacity}, "
        "cold start 120 s"
    )

    run = Runner(args.workers)
    names = [n for n in args.families.split(",") if n]
    chosen, report = tune(train, config, names, run)
    print("\n### Tuning on the training days\n")
    print("\n".join(report))
    print("\nchosen (copy into bench/candidates.py TUNED):")
    for name, (options, value) in chosen.items():
        print(f'    "{name}": "{options}",  # {value:+.1%}')
    op_spec, op_train = OPERATING_POINT, None
    if "burst" in chosen:
        op_spec, op_train = operating_point(train, config, chosen["burst"][0], run)
    print(
        f"\noperating point (train): `{op_spec}`"
        + (" (none within budget)" if not op_train else "")
    )

    specs = [s for n, (o, _) in chosen.items() for s in family(n, o).specs]
    train_rows = _report("Training days 0-9", train, [*specs, op_spec], config, run)
    test_rows = _report(f"Test days {BOUNDARY_DAY}-19", test, [*specs, op_spec], config, run)
    _verdict(test_rows, op_spec, [s for s in specs if s.startswith("burst:")])
    best_ka = min(
        (r for r in test_rows if str(r["policy"]).startswith("keepalive:")),
        key=lambda r: abs(float(r["idle_gpu_hours"]) - _idle(test_rows, op_spec)),
    )
    print("\n### Where the misses come from (test days)\n")
    pick = {str(r["policy"]): r for r in test_rows}
    print(miss_table([pick["reactive"], best_ka, pick[op_spec]]))
    del train_rows
    print(f"\nwall time {time.perf_counter() - began:.0f} s")


def _idle(rows: Sequence[Result], spec: str) -> float:
    return next(float(r["idle_gpu_hours"]) for r in rows if r["policy"] == spec)


def _verdict(rows: Sequence[Result], op_spec: str, curve_specs: Sequence[str]) -> None:
    by = {str(r["policy"]): r for r in rows}
    reactive, op = by["reactive"], by[op_spec]
    ka = curve([r for r in rows if str(r["policy"]).startswith("keepalive:")])
    hh = curve([r for r in rows if str(r["policy"]).startswith("hybrid-histogram:")])
    ttg, ratio = float(op["mean_time_to_gpu_s"]), float(op["idle_ratio"])
    limit_ttg = (1 - TTG_CUT) * float(reactive["mean_time_to_gpu_s"])
    limit_ratio = float(reactive["idle_ratio"]) + IDLE_MARGIN
    print("\n### Goal on the test days\n")
    print(
        f"- absolute: `{op_spec}` mean TTG {ttg:.1f} s (goal <= {limit_ttg:.1f} s: "
        f"{'met' if ttg <= limit_ttg else 'missed'}), idle/busy {ratio:.4f} "
        f"(goal <= {limit_ratio:.4f}: {'met' if ratio <= limit_ratio else 'missed'})"
    )
    met = 0
    for spec in curve_specs:
        r = by[spec]
        ttg, idle = float(r["mean_time_to_gpu_s"]), float(r["idle_gpu_hours"])
        g_ka, g_hh = gain(ttg, at_idle(ka, idle)), gain(ttg, at_idle(hh, idle))
        # Outside the hybrid histogram's swept range only keep-alive is compared.
        ok = g_ka is not None and g_ka >= REL_CUT and (g_hh is None or g_hh >= REL_CUT)
        met += ok
        print(
            f"- `{spec}`: {_pct(g_ka)} vs keep-alive, {_pct(g_hh)} vs the hybrid histogram "
            f"at equal idle: {'met' if ok else 'missed'}"
        )
    print(
        f"- relative: {met} of {len(curve_specs)} points at least {REL_CUT:.0%} below both "
        "at equal idle"
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.0%}"


if __name__ == "__main__":
    main()
