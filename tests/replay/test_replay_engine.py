"""Replay engine on hand-made traces: exact time-to-GPU, idle accounting, queueing, preemption."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import Control, Policy, make_policy, register_policy
from control_plane.replay.trace import Job

COLD = 100.0


def _jobs(*rows: tuple[str, float, int, float]) -> list[Job]:
    """(user, submit, gpus, duration) rows -> jobs in arrival order."""
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


def _run(jobs: list[Job], policy: str, capacity: int = 16, **kw: Any) -> dict[str, Any]:
    load_plugins()
    sim = Simulator(jobs, make_policy(policy), SimConfig(capacity, cold_start_s=COLD, **kw))
    result = sim.run()
    rec = sim.rec
    # Every GPU-second not free is either a job running or GPUs set aside for a user.
    idle = rec.warming_gpu_s + rec.ready_idle_gpu_s
    assert rec.busy_gpu_s + idle == pytest.approx(rec.taken_gpu_s, abs=1e-6)
    # Exact GPU-seconds for the assertions (the result rounds hours).
    result["idle_gpu_s"] = idle
    result["ready_idle_gpu_s"] = rec.ready_idle_gpu_s
    result["busy_gpu_s"] = rec.busy_gpu_s
    return result


def test_reactive_job_waits_the_cold_start_and_it_counts_as_idle() -> None:
    result = _run(_jobs(("a", 0, 8, 1000)), "reactive")
    assert result["mean_time_to_gpu_s"] == COLD
    assert result["warm_hit_rate"] == 0.0
    assert result["idle_gpu_s"] == 8 * COLD
    assert result["busy_gpu_s"] == 8 * 1000
    assert result["misses"]["first_job"] == 1


def test_without_a_cold_start_only_a_claimed_hold_is_a_warm_hit() -> None:
    # Fresh GPUs cost nothing to warm here, so every job starts at once; yet only a job that
    # ran on GPUs kept for its user counts as a warm hit.
    load_plugins()
    jobs = _jobs(("a", 0, 1, 100), ("a", 300, 1, 100))
    for policy, hits in (("reactive", 0), ("keepalive:600", 1)):
        sim = Simulator(jobs, make_policy(policy), SimConfig(16, cold_start_s=0.0))
        result = sim.run()
        assert result["mean_time_to_gpu_s"] == 0.0
        assert result["warm_hits"] == hits, policy
        assert sum(result["misses"].values()) == 2 - hits


def test_oracle_warms_exactly_ahead_for_zero_wait_and_the_same_idle() -> None:
    jobs = _jobs(("a", 0, 8, 1000), ("b", 50, 4, 10), ("a", 3000, 2, 5))
    result = _run(jobs, "oracle")
    assert result["mean_time_to_gpu_s"] == 0.0
    assert result["warm_hit_rate"] == 1.0
    assert result["idle_gpu_s"] == (8 + 4 + 2) * COLD
    assert result["ready_idle_gpu_s"] == 0.0


def test_oracle_does_not_hold_ahead_where_capacity_does_not_allow() -> None:
    # 16 GPUs. a's 12 run 0..1000 on its hold. b's hold (8 GPUs at 100) fails: 4 are free.
    # c's hold (4 GPUs at 300) would fit, but is skipped because b waits in the queue.
    jobs = _jobs(("a", 0, 12, 1000), ("b", 200, 8, 100), ("c", 400, 4, 50))
    result = _run(jobs, "oracle")
    assert result["holds_placed"] == 1 and result["holds_failed"] == 2
    assert result["hold_gpus_placed"] == 12 and result["hold_gpus_claimed"] == 12
    assert result["warm_hits"] == 1
    # At 1000 a ends; b and then c start on fresh GPUs, each after the cold start.
    assert result["misses"]["first_job"] == 2 and sum(result["misses"].values()) == 2
    assert result["mean_time_to_gpu_s"] == pytest.approx((0 + 900 + 700) / 3)
    assert result["mean_queue_wait_s"] == pytest.approx((0 + 800 + 600) / 3)
    assert result["idle_gpu_s"] == (12 + 8 + 4) * COLD
    # Control: with no job waiting, c's hold is placed on the 4 free GPUs and c starts warm.
    alone = _run(_jobs(("a", 0, 12, 1000), ("c", 400, 4, 50)), "oracle")
    assert alone["holds_failed"] == 0 and alone["warm_hits"] == 2
    assert alone["mean_time_to_gpu_s"] == 0.0


def test_queue_wait_then_cold_start() -> None:
    result = _run(_jobs(("a", 0, 8, 1000), ("b", 0, 8, 1000)), "reactive", capacity=8)
    # b gets the GPUs when a ends at 1100, and then warms for 100 s.
    assert result["max_time_to_gpu_s"] == 1000 + 2 * COLD
    assert result["mean_queue_wait_s"] == (0 + 1100) / 2
    assert result["idle_gpu_s"] == 2 * 8 * COLD


@pytest.mark.parametrize(
    ("second_at", "hits", "idle_gpu_s", "miss"),
    [
        # GPUs warm from 200 (job end) to 500: a hit; idle = cold start + 300 s ready.
        (500.0, 1, COLD + 300, None),
        # Keep-alive ran out at 800: a miss; idle = cold + 600 s kept + second cold start.
        (900.0, 0, COLD + 600 + COLD, "burst_start"),
    ],
)
def test_keepalive_keeps_a_finished_jobs_gpus_warm(second_at, hits, idle_gpu_s, miss) -> None:
    result = _run(_jobs(("a", 0, 1, 100), ("a", second_at, 1, 100)), "keepalive:600")
    assert result["warm_hits"] == hits
    assert result["idle_gpu_s"] == idle_gpu_s
    if miss:
        assert result["misses"][miss] == 1


def test_real_demand_preempts_holds_of_other_users() -> None:
    jobs = _jobs(("a", 0, 8, 100), ("b", 300, 8, 100))
    result = _run(jobs, "keepalive:10000", capacity=8)
    assert result["max_time_to_gpu_s"] == COLD  # b never waits for a's warm GPUs
    assert result["preemptions"] == 1 and result["hold_gpus_preempted"] == 8
    # a: cold start + 100 s warm until preempted; b: cold start.
    assert result["idle_gpu_s"] == 8 * (COLD + 100 + COLD)


class _AheadOf(Policy):
    """Holds `gpus` for user a, due at `at` (set aside at `at - cold`)."""

    def __init__(self, at: float, gpus: float) -> None:
        self.at, self.gpus = at, int(gpus)

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        ctl.hold("a", self.gpus, self.at, 1000.0)


register_policy(
    "test-ahead", lambda arg: _AheadOf(*(float(x) for x in arg.split("/"))), replace=True
)


def test_a_job_on_a_hold_still_warming_waits_only_the_rest() -> None:
    jobs = _jobs(("b", 0, 1, 1), ("a", 450, 1, 10))
    result = _run(jobs, "test-ahead:500/1")
    # b waits the cold start; a, arrived at 450 on a GPU warm at 500, waits 50 s.
    assert result["mean_time_to_gpu_s"] == (COLD + 50) / 2
    assert result["misses"]["still_warming"] == 1
    assert result["idle_gpu_s"] == COLD + COLD  # b's cold start, a's 400..500


def test_too_few_warm_gpus_mean_a_cold_start_for_the_rest() -> None:
    jobs = _jobs(("b", 0, 1, 1), ("a", 600, 2, 10))
    result = _run(jobs, "test-ahead:500/1")
    assert result["max_time_to_gpu_s"] == COLD
    assert result["misses"]["too_few_warm"] == 1
    # a's held GPU: set aside at 400, used at 700; its fresh GPU: 600..700.
    assert result["idle_gpu_s"] == COLD + 300 + COLD


def test_queued_jobs_go_in_fair_share_order() -> None:
    jobs = _jobs(("heavy", 0, 8, 5000), ("heavy", 10, 8, 100), ("light", 20, 8, 100))
    result = _run(jobs, "reactive", capacity=8)
    # The GPUs free up at 5100. light, queued after heavy's second job, goes first (starts
    # 5200, ends 5300), so heavy's waits 5300 + cold - 10 = 5390 (first come, first served
    # would have made light wait 5400 - 20 = 5380 instead).
    assert result["max_time_to_gpu_s"] == 5390


def test_static_keeps_n_warm_gpus_per_active_user() -> None:
    jobs = _jobs(("a", 0, 1, 10), ("a", 1000, 1, 10), ("a", 2000, 2, 10))
    result = _run(jobs, "static:2")
    assert result["warm_hits"] == 2
    assert result["misses"]["first_job"] == 1


def test_static_releases_the_pool_when_the_user_goes_quiet() -> None:
    jobs = _jobs(("a", 0, 1, 10), ("b", 20_000, 1, 10))
    result = _run(jobs, "static:2,active=1000")
    # a's two warm GPUs are kept from 0 until 1000 s after its last arrival; b's from its
    # arrival until the replay ends with b's job (cold start + 10 s).
    assert result["hold_gpus_expired"] == 4
    assert result["idle_gpu_s"] == COLD + 2 * 1000 + COLD + 2 * (COLD + 10)


def test_hybrid_histogram_prewarms_a_regular_user_at_the_head_of_its_gaps() -> None:
    jobs = _jobs(*[("a", 1800.0 * k, 1, 60) for k in range(10)])
    result = _run(jobs, "hybrid-histogram:fallback=0")
    # Five gaps make the histogram representative: jobs 6..9 find their GPUs warm.
    assert result["warm_hits"] == 4
    # Each hold: set aside at +1520 (head 1620 minus cold start), claimed at +1800.
    assert result["ready_idle_gpu_s"] == 4 * 180


def test_hybrid_histogram_falls_back_to_keepalive() -> None:
    jobs = _jobs(("a", 0, 1, 100), ("a", 1000, 1, 100))
    assert _run(jobs, "hybrid-histogram")["warm_hits"] == 1
    assert _run(jobs, "hybrid-histogram:fallback=0")["warm_hits"] == 0


def test_holds_respect_the_per_user_budget() -> None:
    jobs = _jobs(("a", 0, 1, 10), ("a", 1000, 1, 10))
    assert _run(jobs, "static:4")["warm_hits"] == 1
    # A hold of 4 is over a budget of 2 (refused twice), but keeping the 1 GPU of the job
    # that ends is within it.
    capped = _run(jobs, "static:4", max_held_gpus_per_user=2)
    assert capped["holds_failed"] == 2 and capped["warm_hits"] == 1
    assert _run(jobs, "static:4", max_held_gpus_per_user=0)["warm_hits"] == 0


def test_jobs_larger_than_the_cluster_are_skipped() -> None:
    result = _run(_jobs(("a", 0, 32, 10), ("a", 5, 1, 10)), "reactive")
    assert result["jobs"] == 1 and result["jobs_skipped"] == 1


def test_backfill_lets_a_small_job_pass_a_blocked_head() -> None:
    jobs = _jobs(("a", 0, 8, 1000), ("b", 10, 8, 10), ("c", 20, 1, 10))
    strict = _run(jobs, "reactive", capacity=10)
    backfill = _run(jobs, "reactive", capacity=10, backfill=True)
    # Strict order: c waits behind b until a ends at 1100. Backfill: c starts at once.
    assert strict["mean_queue_wait_s"] == pytest.approx((0 + 1090 + 1080) / 3)
    assert backfill["mean_queue_wait_s"] == pytest.approx((0 + 1090 + 0) / 3)


class _HoldThenRelease(Policy):
    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        ctl.hold("a", 4, 500.0, 10_000.0)

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        if now == 1000.0:
            assert ctl.held_gpus("a") == 4
            ctl.release("a")
            assert ctl.held_gpus("a") == 0


register_policy("test-release", lambda arg: _HoldThenRelease(), replace=True)


def test_release_ends_a_users_holds_at_once() -> None:
    result = _run(_jobs(("b", 0, 1, 1), ("b", 1000, 1, 1)), "test-release")
    assert result["hold_gpus_expired"] == 4 and result["warm_hits"] == 0
    # Set aside at 400, released at the arrival at 1000.
    assert result["idle_gpu_s"] == COLD + 4 * 600 + COLD
