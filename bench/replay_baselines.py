"""Every baseline policy on the Helios trace: time-to-GPU against idle GPU-hours, as Markdown.

    .venv/bin/python bench/replay_baselines.py [--trace FILE] [--capacity N] [--cold-start S ...]

Prints, per cold start, the table for docs/BENCHMARKS.md, where each policy's misses come
from, and the equivalent `jitgpu replay` command. The replay is deterministic: one run is
enough.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from machine import describe

from control_plane.replay.api import replay_jobs
from control_plane.replay.engine import SimConfig
from control_plane.replay.metrics import Miss
from control_plane.replay.trace import load_trace, shared_trace

HELIOS = "helios_venus_2020-05-28_20d.csv"
POLICIES = [
    "reactive",
    "oracle",
    "keepalive:300",
    "keepalive:600",
    "keepalive:1800",
    "keepalive:3600",
    "static:1",
    "static:8",
    "hybrid-histogram",
    "hybrid-histogram:fallback=600",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=shared_trace(HELIOS))
    parser.add_argument("--capacity", type=int, default=968)
    parser.add_argument("--cold-start", type=float, nargs="+", default=[120.0, 600.0])
    parser.add_argument("--policy", action="append", dest="policies")
    args = parser.parse_args()
    if args.trace is None:
        parser.error(f"--trace is needed: ../shared/traces/{HELIOS} is not beside the repository")
    policies = args.policies or POLICIES
    jobs = load_trace(args.trace)
    print(f"machine: {describe()}\n")
    for cold in args.cold_start:
        config = SimConfig(capacity=args.capacity, gpus_per_node=8, cold_start_s=cold)
        results = replay_jobs(jobs, policies, config)
        flags = " ".join(f"--policy {p}" for p in policies)
        print(
            f"### {args.trace.name}, capacity {args.capacity}, cold start {cold:g} s\n\n"
            f"`jitgpu replay --trace ../shared/traces/{args.trace.name} --capacity "
            f"{args.capacity} --gpus-per-node 8 --cold-start {cold:g} {flags} --format json`\n"
        )
        print(
            "| policy | mean TTG s | p50 TTG s | p95 TTG s | warm hits | idle GPU-h "
            "| idle/busy | holds preempted (GPUs) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            print(
                f"| `{r['policy']}` | {r['mean_time_to_gpu_s']:.1f} | {r['p50_time_to_gpu_s']:.0f} "
                f"| {r['p95_time_to_gpu_s']:.0f} | {r['warm_hit_rate']:.1%} "
                f"| {r['idle_gpu_hours']:,.0f} | {r['idle_ratio']:.3f} "
                f"| {r['hold_gpus_preempted']:,} |"
            )
        busy = results[0]["busy_gpu_hours"]
        print(f"\nBusy GPU-hours (all policies): {busy:,.0f}; jobs: {results[0]['jobs']:,}.\n")
        print("Where the misses come from (jobs):\n")
        categories = [m.value for m in Miss]
        print("| policy | " + " | ".join(categories) + " |")
        print("|---|" + "---:|" * len(categories))
        for r in results:
            counts = r["misses"]
            print(f"| `{r['policy']}` | " + " | ".join(f"{counts[c]:,}" for c in categories) + " |")
        print()


if __name__ == "__main__":
    main()
