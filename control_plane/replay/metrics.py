"""Replay metrics: time-to-GPU, warm hits, exact busy/idle GPU time, and where misses come from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

BURST_GAP_S = 600.0
LONG_GAP_S = 6 * 3600.0
DAY_S = 86400.0


class Miss(StrEnum):
    """Why a job was not a warm hit, judged from what its user had set aside at arrival."""

    FIRST_JOB = "first_job"  # the user's first job in the trace, nothing set aside
    LONG_GAP = "long_gap"  # nothing set aside, more than LONG_GAP_S since the user's last job
    BURST_START = "burst_start"  # nothing set aside, first job of a burst (gap > BURST_GAP_S)
    IN_BURST = "in_burst"  # nothing set aside though the user's last job came within BURST_GAP_S
    TOO_FEW_WARM = "too_few_warm"  # some GPUs set aside, fewer than the job needs
    STILL_WARMING = "still_warming"  # enough set aside, not all warm yet (hold too late)


def classify_miss(gap_s: float | None, set_aside: int, gpus: int) -> Miss:
    """The miss category of a job that was not a warm hit.

    `gap_s` is the time since the user's previous arrival (None: first job); `set_aside`
    the GPUs ready or warming for the user when the job arrived.
    """
    if set_aside >= gpus:
        return Miss.STILL_WARMING
    if set_aside > 0:
        return Miss.TOO_FEW_WARM
    if gap_s is None:
        return Miss.FIRST_JOB
    if gap_s > LONG_GAP_S:
        return Miss.LONG_GAP
    if gap_s > BURST_GAP_S:
        return Miss.BURST_START
    return Miss.IN_BURST


def is_day_start(submit: float, gap_s: float | None) -> bool:
    """The user's first job of a trace day after more than LONG_GAP_S without one: the start of
    a working day where the trace starts at local midnight (Helios), a long return otherwise.
    A user's first job in the trace is not one (no forecaster knows the user yet)."""
    if gap_s is None:
        return False
    return gap_s > LONG_GAP_S and (submit - gap_s) // DAY_S < submit // DAY_S


def weighted_percentile(pairs: Sequence[tuple[float, int]], q: float) -> float:
    """The `q` percentile (0..100) of values counted `weight` times each, from (value, weight)
    pairs sorted by value: the value at or below which q% of the total weight lies."""
    total = sum(w for _, w in pairs)
    if not total:
        return 0.0
    target = total * q / 100.0
    seen = 0
    for value, weight in pairs:
        seen += weight
        if seen >= target:
            return value
    return pairs[-1][0]


def ttg_measures(ttg: Sequence[float], gpus: Sequence[int]) -> dict[str, float]:
    """Per-job and GPU-weighted mean/p95 time-to-GPU. Weighted by GPUs, a 32-GPU job waiting
    two minutes counts as the 64 GPU-minutes it wastes, not as one job among many 1-GPU ones."""
    ordered = sorted(ttg)
    jobs = len(ordered)
    pairs = sorted(zip(ttg, gpus, strict=True))
    weight = sum(gpus)
    return {
        "mean_time_to_gpu_s": round(sum(ordered) / jobs, 3) if jobs else 0.0,
        "p95_time_to_gpu_s": round(percentile(ordered, 95), 3),
        "gpu_weighted_mean_time_to_gpu_s": (
            round(sum(t * g for t, g in pairs) / weight, 3) if weight else 0.0
        ),
        "gpu_weighted_p95_time_to_gpu_s": round(weighted_percentile(pairs, 95), 3),
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of already sorted values; 0 when empty."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass
class Recorder:
    """Accumulates one replay's figures; all GPU times in GPU-seconds."""

    time_to_gpu: list[float] = field(default_factory=list)
    job_gpus: list[int] = field(default_factory=list)  # GPUs of each job, as time_to_gpu
    queue_wait: list[float] = field(default_factory=list)
    warm_hits: int = 0
    busy_gpu_s: float = 0.0
    reactive_idle_gpu_s: float = 0.0  # each started job's GPUs x the cold start
    warming_gpu_s: float = 0.0
    ready_idle_gpu_s: float = 0.0
    holds_placed: int = 0
    holds_failed: int = 0
    hold_gpus_placed: int = 0
    hold_gpus_claimed: int = 0
    hold_gpus_expired: int = 0
    hold_gpus_preempted: int = 0
    preemptions: int = 0
    claims_misfit: int = 0  # jobs whose held GPUs spanned too many nodes: started fresh
    jobs_skipped: int = 0
    taken_gpu_s: float = 0.0
    user_idle_gpu_s: dict[str, float] = field(default_factory=dict)  # charged per user
    misses: dict[str, int] = field(default_factory=lambda: {m.value: 0 for m in Miss})
    miss_ttg_s: dict[str, float] = field(default_factory=lambda: {m.value: 0.0 for m in Miss})
    day_starts: int = 0
    day_start_hits: int = 0
    day_start_ttg_s: float = 0.0

    def job_started(self, ttg: float, miss: Miss | None, day_start: bool, gpus: int = 1) -> None:
        """One job's time-to-GPU; `miss` is its category when it was not a warm hit."""
        self.time_to_gpu.append(ttg)
        self.job_gpus.append(gpus)
        if miss is None:
            self.warm_hits += 1
        else:
            self.misses[miss] += 1
            self.miss_ttg_s[miss] += ttg
        if day_start:
            self.day_starts += 1
            self.day_start_hits += miss is None
            self.day_start_ttg_s += ttg

    def charge_idle(
        self, aside_at: float, warm_at: float, until: float, gpus: int = 1, user: str | None = None
    ) -> None:
        """GPUs set aside at `aside_at`, warm at `warm_at`, idle until `until` (for `user`)."""
        if gpus <= 0 or until <= aside_at:
            return
        if user is not None:
            by_user = self.user_idle_gpu_s
            by_user[user] = by_user.get(user, 0.0) + (until - aside_at) * gpus
        warm_end = min(warm_at, until)
        if warm_end > aside_at:
            self.warming_gpu_s += (warm_end - aside_at) * gpus
        if until > warm_at:
            self.ready_idle_gpu_s += (until - max(warm_at, aside_at)) * gpus

    def result(self, policy: str, capacity: int, cold_start_s: float) -> dict[str, object]:
        ttg = sorted(self.time_to_gpu)
        jobs = len(ttg)
        measures = ttg_measures(self.time_to_gpu, self.job_gpus)
        busy_h = self.busy_gpu_s / 3600.0
        idle_h = (self.warming_gpu_s + self.ready_idle_gpu_s) / 3600.0
        return {
            "policy": policy,
            "jobs": jobs,
            "jobs_skipped": self.jobs_skipped,
            "capacity_gpus": capacity,
            "cold_start_s": cold_start_s,
            "mean_time_to_gpu_s": measures["mean_time_to_gpu_s"],
            "p50_time_to_gpu_s": round(percentile(ttg, 50), 3),
            "p95_time_to_gpu_s": measures["p95_time_to_gpu_s"],
            "gpu_weighted_mean_time_to_gpu_s": measures["gpu_weighted_mean_time_to_gpu_s"],
            "gpu_weighted_p95_time_to_gpu_s": measures["gpu_weighted_p95_time_to_gpu_s"],
            "p99_time_to_gpu_s": round(percentile(ttg, 99), 3),
            "max_time_to_gpu_s": round(ttg[-1], 3) if ttg else 0.0,
            "mean_queue_wait_s": round(sum(self.queue_wait) / jobs, 3) if jobs else 0.0,
            "warm_hits": self.warm_hits,
            "warm_hit_rate": round(self.warm_hits / jobs, 6) if jobs else 0.0,
            "busy_gpu_hours": round(busy_h, 3),
            "idle_gpu_hours": round(idle_h, 3),
            "idle_warming_gpu_hours": round(self.warming_gpu_s / 3600.0, 3),
            "idle_ready_gpu_hours": round(self.ready_idle_gpu_s / 3600.0, 3),
            "idle_ratio": round(idle_h / busy_h, 6) if busy_h else 0.0,
            # Idle spent on pre-warming: over what reactive idles (every job's own warm-up).
            "extra_idle_ratio": (
                round((idle_h - self.reactive_idle_gpu_s / 3600.0) / busy_h, 6) if busy_h else 0.0
            ),
            "taken_gpu_hours": round(self.taken_gpu_s / 3600.0, 3),
            "holds_placed": self.holds_placed,
            "holds_failed": self.holds_failed,
            "hold_gpus_placed": self.hold_gpus_placed,
            "hold_gpus_claimed": self.hold_gpus_claimed,
            "hold_gpus_expired": self.hold_gpus_expired,
            "hold_gpus_preempted": self.hold_gpus_preempted,
            "preemptions": self.preemptions,
            "claims_misfit": self.claims_misfit,
            "misses": dict(self.misses),
            "miss_time_to_gpu_s": {k: round(v, 1) for k, v in self.miss_ttg_s.items()},
            "day_start_jobs": self.day_starts,
            "day_start_warm_hits": self.day_start_hits,
            "day_start_mean_time_to_gpu_s": (
                round(self.day_start_ttg_s / self.day_starts, 3) if self.day_starts else 0.0
            ),
        }
