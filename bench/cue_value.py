"""What a sweep's size known at its first submit is worth: the `array_size` cue, at its best.

    .venv/bin/python bench/cue_value.py [--budget 0.05] [--cold-start 120]

The shared traces carry no agent-only signals. This gives each job the cue a smart agent
reading a sweep's launcher (a job array, a loop in a script, a grid) would pass on at best:
the whole number of jobs of the clump it starts or joins (the user's submits at most 120 s
apart, the session model's clump gap), known from the clump's first submit. It is taken from
the trace itself, so it is a ceiling, not a forecast: a real launcher names one sweep, where
a clump may be several. Per trace, the default policy as leave-one-trace-out chooses it
(`bench/generalize.py`: structure and starting price from the other traces) runs with the
session model beside it (`session=1`), without and with the cue, next to the default alone,
the session model alone (without and with the cue) and reactive. The replay is
deterministic: one run of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

from generalize import TRACES, Runner, _f, _gain, _pct, choose, default_spec, load_traces
from machine import describe

from control_plane.replay.trace import Job
from predictors.session import CLUMP_GAP_S

CUED = " with the cue"


def with_clump_sizes(jobs: Sequence[Job], gap_s: float = CLUMP_GAP_S) -> list[Job]:
    """Each job with `array_size` = the number of jobs of its user's clump (submits at most
    `gap_s` apart), as if the agent had known the sweep's size at its first submit."""
    clumps: list[list[int]] = []  # indices into jobs, per clump
    last: dict[str, tuple[float, int]] = {}  # user -> (latest submit, its clump)
    for i, job in enumerate(jobs):  # jobs are in submit order
        seen = last.get(job.user)
        if seen is None or job.submit - seen[0] > gap_s:
            clumps.append([])
            seen = (job.submit, len(clumps) - 1)
        clumps[seen[1]].append(i)
        last[job.user] = (job.submit, seen[1])
    size = [0] * len(jobs)
    for members in clumps:
        for i in members:
            size[i] = len(members)
    return [dataclasses.replace(job, array_size=size[i]) for i, job in enumerate(jobs)]


def rows_for(run: Runner, trace: str, cold: float, budget: float, names: list[str]) -> list[str]:
    options, price = choose(run, [t for t in names if t != trace], cold, budget)
    default = default_spec(options, budget, price)
    reactive = run(trace, cold, "reactive")
    specs = [
        ("default (chosen on the others)", trace, default),
        ("default, session=1", trace, f"{default},session=1"),
        ("default, session=1, cue", trace + CUED, f"{default},session=1"),
        ("session alone", trace, "session"),
        ("session alone, cue", trace + CUED, "session"),
    ]
    lines = []
    for label, source, spec in specs:
        r = run(source, cold, spec)
        cells = [trace, f"{cold:g}", label]
        for key in ("mean_time_to_gpu_s", "gpu_weighted_mean_time_to_gpu_s"):
            ttg = _f(r, key)
            cells.append(f"{ttg:.1f} ({_pct(_gain(ttg, _f(reactive, key)))})")
        cells.append(f"{_f(r, 'extra_idle_ratio'):.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=0.05)
    parser.add_argument("--cold-start", type=float, nargs="+", default=[120.0])
    args = parser.parse_args()
    jobs, capacity = load_traces(parser)
    for name in TRACES:
        jobs[name + CUED] = with_clump_sizes(jobs[name])
        capacity[name + CUED] = capacity[name]
    run = Runner(jobs, capacity)
    names = list(TRACES)
    started = time.perf_counter()
    lines = [
        line
        for cold in args.cold_start
        for trace in names
        for line in rows_for(run, trace, cold, args.budget, names)
    ]
    took = time.perf_counter() - started
    print(
        f"The array_size cue at its best, idle budget {args.budget:g} "
        f"(`bench/cue_value.py`): {run.runs} replays in {took:.0f} s on {describe()}.\n\n"
        "| trace | cold start s | policy | mean TTG s (vs reactive) "
        "| GPU-wtd mean TTG s (vs reactive) | extra idle |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(lines)
    )


if __name__ == "__main__":
    main()
