"""Replay speed: jobs per second replaying the Helios trace (10,674 jobs) per baseline policy.

    .venv/bin/python bench/replay_speed.py [--trace FILE] [--runs 3]

Capacity 968 GPUs, 8 GPUs per node, cold start 120 s (the BENCHMARKS.md setting). Each
policy is replayed `--runs` times; the median wall time is reported (target: under 10 s per
policy). Trace loading is timed apart.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from machine import describe

from control_plane.replay.api import replay_jobs
from control_plane.replay.engine import SimConfig
from control_plane.replay.trace import load_trace, shared_trace

HELIOS = "helios_venus_2020-05-28_20d.csv"
POLICIES = ["reactive", "oracle", "keepalive:600", "static:8", "hybrid-histogram"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=shared_trace(HELIOS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--capacity", type=int, default=968)
    parser.add_argument("--cold-start", type=float, default=120.0)
    parser.add_argument("--policy", action="append", dest="policies")
    args = parser.parse_args()
    if args.trace is None:
        parser.error(f"--trace is needed: ../shared/traces/{HELIOS} is not beside the repository")
    print(f"machine: {describe()}")
    started = time.perf_counter()
    jobs = load_trace(args.trace)
    loaded = time.perf_counter() - started
    print(f"trace: {args.trace.name}, {len(jobs)} jobs, loaded in {loaded:.2f} s")
    config = SimConfig(capacity=args.capacity, gpus_per_node=8, cold_start_s=args.cold_start)
    print(f"capacity {args.capacity} GPUs, cold start {args.cold_start:g} s, {args.runs} runs each")
    for policy in args.policies or POLICIES:
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            replay_jobs(jobs, [policy], config)
            walls.append(time.perf_counter() - started)
        wall = statistics.median(walls)
        print(f"  {policy:18s} {wall:6.2f} s   {len(jobs) / wall:8,.0f} jobs/s   (median)")


if __name__ == "__main__":
    main()
