"""Pareto figure: mean time-to-GPU against idle GPU-hours, every policy swept over its threshold.

    .venv/bin/python bench/pareto.py [--trace helios|itp|FILE] [--days A:B] [--capacity N]
        [--png FILE] [--workers 2] [--per-cluster] [--families LABELS|all]

Helios (the default): capacity 968, 8 GPUs per node, cold start 120 s; writes
docs/pareto-helios.png. ITP (`--trace itp`): the source publishes no capacity, so the
replay uses the peak demand (every job started at its submit) rounded up to whole 8-GPU
nodes, so that queueing does not drive the result; writes docs/pareto-itp.png; by default
only the burst, burst-alone, histogram and ewma curves, the burst ones over
`candidates.ITP_PRICES` (`--families all` runs every curve: about 12 minutes here). With
`--per-cluster` each ITP cluster is replayed on its own (its own peak as capacity) under
reactive, keep-alive and the tuned burst policy. `--days 10:20` replays only the jobs
submitted in those days. Every predictor family runs with the options `bench/tune.py`
chose on Helios days 0-9 (`candidates.TUNED`); keep-alive and the hybrid histogram are
swept too, and each row shows their time-to-GPU at the same idle GPU-hours (linear between
neighbouring sweep points). Prints the machine, the `jitgpu replay` command of each curve
and the Markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from candidates import (
    ITP_FAMILIES,
    ITP_PRICES,
    OPERATING_POINT,
    TUNED,
    family,
    tuned_families,
)
from machine import REPO, describe
from sweeps import (
    Result,
    at_idle,
    curve,
    gain,
    hybrid_family,
    keepalive_family,
    markdown_table,
    miss_table,
    peak_demand,
    plot,
    run_specs,
    window,
)

from control_plane.replay.engine import SimConfig
from control_plane.replay.trace import Job, load_trace, shared_trace

TRACES = {"helios": "helios_venus_2020-05-28_20d.csv", "itp": "itp_microsoft_2021-03_60d.csv"}


def _trace(arg: str) -> Path:
    name = TRACES.get(arg)
    path = shared_trace(name) if name else Path(arg)
    if path is None or not path.is_file():
        raise SystemExit(f"trace not found: {arg} (the shared traces live in ../shared/traces/)")
    return path


def _command(trace: Path, capacity: int, specs: tuple[str, ...]) -> str:
    flags = " ".join(f"--policy {s}" for s in specs)
    return (
        f"jitgpu replay --trace ../shared/traces/{trace.name} --capacity {capacity} "
        f"--gpus-per-node 8 --cold-start 120 {flags} --format json"
    )


def aggregate(args: argparse.Namespace, trace: Path, jobs: list[Job], capacity: int) -> None:
    config = SimConfig(capacity=capacity, gpus_per_node=8, cold_start_s=120.0)
    helios = trace.name == TRACES["helios"]
    fams = tuned_families(() if helios or args.families == "all" else ITP_PRICES)
    if args.families == "all":
        # Only Helios starts at local midnight: clock bins mean nothing elsewhere.
        fams = [f for f in fams if helios or f.label != "seasonality"]
    elif args.families:
        fams = [f for f in fams if f.label in args.families.split(",")]
    elif not helios:
        fams = [f for f in fams if f.label in ITP_FAMILIES]
    fams += [keepalive_family(), hybrid_family()]
    # One call for every replay, so that every worker stays busy.
    flat = ["reactive", "oracle", OPERATING_POINT, *(s for fam in fams for s in fam.specs)]
    done = dict(zip(flat, run_specs(jobs, flat, config, args.workers), strict=True))
    corners = [done["reactive"], done["oracle"]]
    swept = [(fam.label, [done[s] for s in fam.specs]) for fam in fams]
    by_label = dict(swept)
    ka, hh = curve(by_label["keepalive"]), curve(by_label["hybrid-histogram"])
    print(
        f"\n### {trace.name}{_days(args)}: {len(jobs):,} jobs, capacity {capacity}, "
        "cold start 120 s\n"
    )
    for fam in fams:
        print(f"- {fam.label}: `{_command(trace, capacity, fam.specs)}`")
    print()
    rows = [*corners, done[OPERATING_POINT]]
    rows += [r for label, rs in swept for r in rs if label not in _BASELINES]
    print(markdown_table(rows, ka, hh))
    print("\nBaseline sweeps (keep-alive S; hybrid histogram range = fallback):\n")
    print(markdown_table([*by_label["keepalive"], *by_label["hybrid-histogram"]], ka, hh))
    op = done[OPERATING_POINT]
    near = min(by_label["keepalive"], key=lambda r: abs(_idle(r) - _idle(op)))
    print("\nWhere the misses come from (jobs, and the seconds of mean TTG they add):\n")
    print(miss_table([corners[0], near, op]))
    png = args.png or str(REPO / "docs" / f"pareto-{_stem(trace)}.png")
    title = f"{trace.name}{_days(args)}: {len(jobs):,} jobs, capacity {capacity}, cold start 120 s"
    reactive = corners[0]
    busy = float(reactive["busy_gpu_hours"])
    goal = (
        (float(reactive["idle_ratio"]) + 0.05) * busy,
        0.2 * float(reactive["mean_time_to_gpu_s"]),
    )
    plot(png, title, swept, corners, goal)
    print(f"\nwrote {Path(png).resolve().relative_to(REPO) if _inside(png) else png}")


_BASELINES = ("keepalive", "hybrid-histogram")


def per_cluster(args: argparse.Namespace, jobs: list[Job]) -> None:
    """Each ITP cluster alone: baselines and the tuned burst sweep."""
    burst = family("burst", TUNED["burst"], values=ITP_PRICES)
    print("\n### ITP per cluster (each on its own peak demand)\n")
    print(
        "| cluster | jobs | capacity | reactive TTG s | keepalive:600 TTG s / idle GPU-h "
        "| operating point TTG s / idle GPU-h | keepalive TTG at same idle | vs keepalive "
        "| burst sweep vs keepalive (min / median / max, points in range) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for user in sorted({j.user for j in jobs}):
        mine = [j for j in jobs if j.user == user]
        capacity = peak_demand(mine)
        config = SimConfig(capacity=capacity, gpus_per_node=8, cold_start_s=120.0)
        specs = ["reactive", *keepalive_family().specs, OPERATING_POINT, *burst.specs]
        results = run_specs(mine, specs, config, args.workers)
        by = {str(r["policy"]): r for r in results}
        ka = curve([r for r in results if str(r["policy"]).startswith("keepalive:")])
        op = by[OPERATING_POINT]
        ka_op = at_idle(ka, _idle(op))
        gains = [
            g
            for s in burst.specs
            if (g := gain(_ttg(by[s]), at_idle(ka, _idle(by[s])))) is not None
        ]
        spread = (
            f"{min(gains):+.0%} / {statistics.median(gains):+.0%} / {max(gains):+.0%} "
            f"({len(gains)} of {len(burst.specs)})"
            if gains
            else "n/a"
        )
        k600 = by["keepalive:600"]
        g_op = gain(_ttg(op), ka_op)
        print(
            f"| {user} | {len(mine):,} | {capacity:,} | {_ttg(by['reactive']):.1f} "
            f"| {_ttg(k600):.1f} / {_idle(k600):,.0f} | {_ttg(op):.1f} / {_idle(op):,.0f} "
            f"| {'n/a' if ka_op is None else f'{ka_op:.1f}'} "
            f"| {'n/a' if g_op is None else f'{g_op:+.0%}'} | {spread} |"
        )


def _idle(r: Result) -> float:
    return float(r["idle_gpu_hours"])


def _ttg(r: Result) -> float:
    return float(r["mean_time_to_gpu_s"])


def _days(args: argparse.Namespace) -> str:
    return f", days {args.days}" if args.days else ""


def _stem(trace: Path) -> str:
    return next((k for k, v in TRACES.items() if v == trace.name), trace.stem)


def _inside(path: str) -> bool:
    return Path(path).resolve().is_relative_to(REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="helios", help="helios, itp or a CSV file")
    parser.add_argument("--days", default=None, help="A:B - only jobs submitted in days [A, B)")
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--png", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--per-cluster", action="store_true")
    parser.add_argument(
        "--families",
        default=None,
        help="curves to sweep, by label (comma-separated), or 'all'; default: all on Helios, "
        "burst, burst alone, histogram and ewma elsewhere (to keep the run to minutes)",
    )
    args = parser.parse_args()
    began = time.perf_counter()
    trace = _trace(args.trace)
    print(f"machine: {describe()}")
    jobs = load_trace(trace)
    if args.days:
        first, _, last = args.days.partition(":")
        jobs = window(jobs, float(first), float(last))
    if args.per_cluster:
        per_cluster(args, jobs)
    else:
        helios = trace.name == TRACES["helios"]
        capacity = args.capacity or (968 if helios else peak_demand(jobs))
        aggregate(args, trace, jobs, capacity)
    print(f"\nwall time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
