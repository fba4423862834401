"""Policy sweeps for the Pareto figures: run replays, compare at equal idle, tables and plots."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import pairwise

from control_plane.replay.api import replay_jobs
from control_plane.replay.engine import SimConfig
from control_plane.replay.trace import Job

Result = dict[str, object]
RunFn = Callable[[Sequence[Job], Sequence[str], SimConfig], list[Result]]
DAY_S = 86400.0

# Baseline sweeps: keep-alive on a dense grid, so that interpolating between neighbours is
# close to the real curve; the hybrid histogram over its range, keep-alive fallback = range
# as in the paper.
KEEPALIVE_S = (
    60, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700,
    3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200, 86400,
)  # fmt: skip
HYBRID_RANGE_S = (
    60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600, 28800,
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    """One curve: a policy swept over one knob, one spec per operating point."""

    label: str
    specs: tuple[str, ...]


def keepalive_family() -> Family:
    return Family("keepalive", tuple(f"keepalive:{s}" for s in KEEPALIVE_S))


def hybrid_family() -> Family:
    specs = tuple(f"hybrid-histogram:range={r},fallback={r}" for r in HYBRID_RANGE_S)
    return Family("hybrid-histogram", specs)


def window(jobs: Sequence[Job], first_day: float, last_day: float) -> list[Job]:
    """Jobs submitted in [first_day, last_day) days of the trace, in the trace's order."""
    lo, hi = first_day * DAY_S, last_day * DAY_S
    return [j for j in jobs if lo <= j.submit < hi]


def peak_demand(jobs: Sequence[Job], gpus_per_node: int = 8) -> int:
    """Most GPUs in use at once if every job started at its submit, rounded up to whole nodes:
    a capacity at which queueing does not dominate (for traces that publish none)."""
    events = sorted(
        [(j.submit, j.gpus) for j in jobs] + [(j.submit + j.duration, -j.gpus) for j in jobs],
        key=lambda e: (e[0], e[1]),
    )
    busy = peak = 0
    for _, delta in events:
        busy += delta
        peak = max(peak, busy)
    return -(-peak // gpus_per_node) * gpus_per_node


# -- running ----------------------------------------------------------------------------------

_JOBS: Sequence[Job] = ()
_CONFIG: SimConfig | None = None


def _one(spec: str) -> Result:
    assert _CONFIG is not None
    return replay_jobs(_JOBS, [spec], _CONFIG)[0]


def run_specs(
    jobs: Sequence[Job], specs: Sequence[str], config: SimConfig, workers: int = 1
) -> list[Result]:
    """One replay per spec, in order; `workers` > 1 runs them in forked processes (the replay
    is deterministic, so the results do not depend on it)."""
    global _JOBS, _CONFIG
    if workers <= 1 or len(specs) < 2:
        return replay_jobs(jobs, specs, config)
    _JOBS, _CONFIG = jobs, config
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            return list(pool.map(_one, specs))
    finally:
        _JOBS, _CONFIG = (), None


# -- comparing at equal idle ------------------------------------------------------------------


def curve(results: Sequence[Result]) -> list[tuple[float, float]]:
    """(idle GPU-hours, mean time-to-GPU) points, sorted by idle."""
    return sorted((float(r["idle_gpu_hours"]), float(r["mean_time_to_gpu_s"])) for r in results)


def at_idle(points: Sequence[tuple[float, float]], idle: float) -> float | None:
    """Time-to-GPU of a swept curve at `idle` GPU-hours, linearly interpolated between its
    neighbouring points; None outside the swept range."""
    for (i0, t0), (i1, t1) in pairwise(points):
        if i0 <= idle <= i1:
            return t0 if i1 == i0 else t0 + (t1 - t0) * (idle - i0) / (i1 - i0)
    return None


def at_idle_or_less(points: Sequence[tuple[float, float]], idle: float) -> float | None:
    """The best time-to-GPU a swept curve gives on at most `idle` GPU-hours: `at_idle`
    there, or a point of the sweep on less idle that did better (a baseline that does better
    on less idle beats us at equal idle too; past the sweep's end, its best); None below
    the sweep's range."""
    if not points or idle < points[0][0]:
        return None
    found = [t for i, t in points if i <= idle]
    value = at_idle(points, idle)
    if value is not None:
        found.append(value)
    return min(found)


def gain(ttg: float, reference: float | None) -> float | None:
    """How much lower `ttg` is than `reference`, as a fraction (0.2 = 20% lower)."""
    if reference is None or reference <= 0:
        return None
    return 1.0 - ttg / reference


# -- output -----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.0%}"


def _num(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def markdown_table(
    results: Sequence[Result],
    keepalive: Sequence[tuple[float, float]],
    hybrid: Sequence[tuple[float, float]],
) -> str:
    """One row per result, with keep-alive's and the hybrid histogram's time-to-GPU at the same
    idle GPU-hours and how much lower the row's is."""
    lines = [
        "| policy | mean TTG s | p95 TTG s | warm hits | idle GPU-h | idle/busy "
        "| keepalive TTG at same idle | vs keepalive | hybrid-hist. TTG at same idle "
        "| vs hybrid-hist. |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ttg, idle = float(r["mean_time_to_gpu_s"]), float(r["idle_gpu_hours"])
        ka, hh = at_idle(keepalive, idle), at_idle(hybrid, idle)
        lines.append(
            f"| `{r['policy']}` | {ttg:.1f} | {float(r['p95_time_to_gpu_s']):.0f} "
            f"| {float(r['warm_hit_rate']):.1%} | {idle:,.0f} | {float(r['idle_ratio']):.4f} "
            f"| {_num(ka)} | {_pct(gain(ttg, ka))} | {_num(hh)} | {_pct(gain(ttg, hh))} |"
        )
    return "\n".join(lines)


MISS_KINDS = (
    ("first_job", "first job of a user"),
    ("long_gap", "long gap (> 6 h)"),
    ("burst_start", "first job of a burst (gap 10 min - 6 h)"),
    ("in_burst", "in a burst, nothing held (previous job still running)"),
    ("too_few_warm", "concurrency beyond warm GPUs"),
    ("still_warming", "hold still warming"),
)


def miss_table(results: Sequence[Result]) -> str:
    """Per miss kind: jobs, and seconds of mean time-to-GPU it adds; then the starts of the
    working day (a subset of the long gaps) apart."""
    head = "| miss kind | " + " | ".join(f"`{r['policy']}`" for r in results) + " |"
    lines = [head, "|---|" + "---:|" * len(results)]
    for key, label in MISS_KINDS:
        cells = []
        for r in results:
            jobs = int(r["jobs"]) or 1
            count = r["misses"][key]  # type: ignore[index]
            seconds = r["miss_time_to_gpu_s"][key] / jobs  # type: ignore[index]
            cells.append(f"{count:,} jobs, {seconds:.1f} s")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [
        f"{r['day_start_jobs']:,} jobs, {r['day_start_warm_hits']:,} warm, "
        f"mean TTG {float(r['day_start_mean_time_to_gpu_s']):.0f} s"
        for r in results
    ]
    lines.append("| start of the working day (first job of a day after > 6 h) | ")
    lines[-1] += " | ".join(cells) + " |"
    lines.append(
        "| total mean TTG | "
        + " | ".join(f"{r['mean_time_to_gpu_s']:.1f} s" for r in results)
        + " |"
    )
    return "\n".join(lines)


def plot(
    path: str,
    title: str,
    families: Sequence[tuple[str, Sequence[Result]]],
    corners: Sequence[Result],
    goal: tuple[float, float] | None = None,
) -> None:
    """Idle GPU-hours against mean time-to-GPU, one curve per family, reactive and oracle as
    single points (the oracle is the corner every policy aims at); `goal` (most idle GPU-hours,
    most time-to-GPU) is shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=110)
    for label, results in families:
        points = curve(results)
        style = "--" if label in ("keepalive", "hybrid-histogram") else "-"
        ax.plot(
            [p[0] for p in points], [p[1] for p in points], style, marker="o", ms=3, label=label
        )
    for r in corners:
        ax.scatter(
            [float(r["idle_gpu_hours"])],
            [float(r["mean_time_to_gpu_s"])],
            marker="*",
            s=140,
            zorder=5,
            label=str(r["policy"]),
        )
    if goal is not None:
        low = min(float(r["idle_gpu_hours"]) for r in corners) * 0.8
        ax.fill_between([low, goal[0]], 0, goal[1], color="green", alpha=0.12, label="goal")
    ax.set_xscale("log")
    ax.set_xlabel("idle GPU-hours (log scale)")
    ax.set_ylabel("mean time-to-GPU (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
