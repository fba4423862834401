"""The realised idle ratio over a sliding window, from hold and allocation spans."""

from __future__ import annotations

import pytest

from control_plane.scheduling.idle_budget import (
    MIN_BUSY_GPU_S,
    HoldSpan,
    UseSpan,
    realised_idle,
)

NOW = 1_000_000.0


def test_unclaimed_holds_count_whole_and_claimed_ones_without_their_warmup() -> None:
    holds = [
        HoldSpan(placed_at=NOW - 600, ended_at=NOW - 300, gpu_count=4),  # expired: 1200
        HoldSpan(placed_at=NOW - 500, ended_at=NOW - 100, gpu_count=2, claimed=True, warmup_s=150),
        HoldSpan(placed_at=NOW - 60, ended_at=None, gpu_count=1),  # still held: 60
    ]
    uses = [UseSpan(allocated_at=NOW - 100, released_at=None, gpu_count=2)]
    usage = realised_idle(holds, uses, now=NOW, window_s=3600)
    assert usage.idle_gpu_s == 1200 + (400 - 150) * 2 + 60
    assert usage.busy_gpu_s == 200
    assert usage.ratio == pytest.approx(usage.idle_gpu_s / 200)


def test_only_the_window_counts() -> None:
    holds = [HoldSpan(placed_at=NOW - 7200, ended_at=NOW - 1800, gpu_count=1)]
    uses = [UseSpan(allocated_at=NOW - 10_000, released_at=NOW - 1000, gpu_count=8)]
    usage = realised_idle(holds, uses, now=NOW, window_s=3600)
    assert usage.idle_gpu_s == 1800 and usage.busy_gpu_s == 2600 * 8
    assert realised_idle([], [], now=NOW).ratio is None


def test_a_small_tenant_is_judged_on_a_floor_of_busy_time() -> None:
    usage = realised_idle(
        [HoldSpan(placed_at=NOW - 100, ended_at=NOW, gpu_count=1)],
        [UseSpan(allocated_at=NOW - 100, released_at=NOW, gpu_count=1)],
        now=NOW,
    )
    assert usage.ratio == 1.0
    assert usage.allowance_gpu_s(0.05) == 0.05 * MIN_BUSY_GPU_S
    assert not usage.over(0.05) and usage.over(0.0)


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window_s"):
        realised_idle([], [], now=NOW, window_s=0)
