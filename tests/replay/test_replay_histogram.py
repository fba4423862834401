"""Hybrid histogram: the keep-alive fallback when bin counts are too flat or gaps out of range."""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.histogram import GapHistogram, HybridHistogram
from control_plane.replay.policies import make_policy
from control_plane.replay.trace import Job

COLD = 100.0
# Range 600 s: ten bins of 60 s. One gap in each of k bins gives a coefficient of variation
# of sqrt(10 / k - 1): 1.0 after five distinct gaps, 0.816 after six (flat, below 2).
FLAT_GAPS = (30.0, 90.0, 150.0, 210.0, 270.0, 330.0)
# The same number of gaps, all in bin 0: CV sqrt(10 - 1) = 3 (representative).
PEAKED_GAPS = (30.0,) * 6
LONG = 20_000.0  # beyond the default 4 h range: out of range
REGULAR = 1800.0  # bin 30 of the default range


def _user_jobs(gaps: tuple[float, ...], duration: float = 10.0) -> list[Job]:
    """One user's jobs, the first at 0 and each later one `gap` after the previous."""
    times = [0.0, *accumulate(gaps)]
    return [Job(i, f"j{i}", "a", t, 1, duration) for i, t in enumerate(times)]


class _Recorder:
    """A Control that records what the policy asks for and keeps every GPU it is offered."""

    cold_start_s = COLD

    def __init__(self) -> None:
        self.now = 0.0
        self.holds: list[tuple[int, float, float]] = []  # (job seq, at, ttl)
        self.retains: list[tuple[int, float]] = []  # (job seq, ttl)
        self._seq = -1

    def hold(self, user: str, gpus: int, at: float, ttl_s: float, confidence: float = 1.0) -> None:
        self.holds.append((self._seq, at, ttl_s))

    def retain(self, job: Job, gpus: int, ttl_s: float, confidence: float = 1.0) -> int:
        self.retains.append((job.seq, ttl_s))
        return gpus

    def held_gpus(self, user: str) -> int:
        # One GPU per hold asked for whose window is still open (nothing is ever claimed).
        return sum(1 for _, at, ttl in self.holds if at + ttl > self.now)

    def extend(self, user: str, until: float) -> None:
        pass

    def release(self, user: str) -> None:
        pass


def _decisions(policy: HybridHistogram, jobs: list[Job]) -> _Recorder:
    ctl = _Recorder()
    for job in jobs:
        ctl.now, ctl._seq = job.submit, job.seq
        policy.on_arrival(job, job.submit, ctl)
    for job in jobs:
        ctl.now = job.submit + job.duration
        policy.on_finish(job, ctl.now, ctl)
    return ctl


def test_a_windowed_job_keeps_its_own_gpus_where_no_hold_covers_it_until_the_window_closes() -> (
    None
):
    policy = HybridHistogram(range_s=600.0)
    jobs = _user_jobs(PEAKED_GAPS)
    ctl = _decisions(policy, jobs[:6])
    assert (5, 150.0, pytest.approx(66.0)) in ctl.holds
    # The window's hold was claimed (here: forgotten), the job ends at 160: it keeps its own
    # GPU to 216 s, the window's close, instead of letting a new one warm.
    ctl.holds.clear()
    policy._windowed[99] = 216.0
    ctl.now = 160.0
    policy.on_finish(Job(99, "j99", "a", 150.0, 1, 10.0), 160.0, ctl)
    assert ctl.retains[-1] == (99, pytest.approx(56.0))
    # After the window closed it keeps nothing.
    policy._windowed[98] = 216.0
    policy.on_finish(Job(98, "j98", "a", 150.0, 1, 100.0), 250.0, ctl)
    assert ctl.retains[-1] == (99, pytest.approx(56.0))


def _run(jobs: list[Job], spec: str) -> dict[str, Any]:
    load_plugins()
    return Simulator(jobs, make_policy(spec), SimConfig(16, cold_start_s=COLD)).run()


def test_flat_bin_counts_are_not_representative_so_every_job_falls_back_to_keepalive() -> None:
    jobs = _user_jobs(FLAT_GAPS)
    ctl = _decisions(HybridHistogram(range_s=600.0), jobs)
    # Five and six gaps are enough samples, but their bins are too flat (CV 1.0, 0.816 < 2).
    assert ctl.holds == []
    assert ctl.retains == [(job.seq, 600.0) for job in jobs]


def test_the_same_gaps_in_one_bin_or_under_a_lower_threshold_open_windows() -> None:
    # Control for the test above: gaps in one bin are representative from the fifth gap on.
    peaked = _decisions(HybridHistogram(range_s=600.0), _user_jobs(PEAKED_GAPS))
    # Head bin 0 (pre-warm at once), tail bin 0: keep to 60 s * 1.1.
    assert peaked.holds == [(5, 150.0, pytest.approx(66.0)), (6, 180.0, pytest.approx(66.0))]
    # The windowed jobs 5 and 6 keep nothing of their own: their windows' holds cover them.
    assert peaked.retains == [(seq, 600.0) for seq in range(5)]
    # The flat gaps pass a threshold of 0.5: the threshold is what stopped them.
    low = _decisions(HybridHistogram(range_s=600.0, cv_threshold=0.5), _user_jobs(FLAT_GAPS))
    # After five gaps the 99th percentile is in bin 4, after six in bin 5.
    assert low.holds == [(5, 750.0, pytest.approx(330.0)), (6, 1080.0, pytest.approx(396.0))]


def test_flat_user_in_the_replay_is_served_by_keepalive_alone() -> None:
    jobs = _user_jobs(FLAT_GAPS)  # arrivals 0, 30, 120, 270, 480, 750, 1080
    # Keep-alive of 600 s (the range): jobs 2..6 each find a GPU kept after an earlier job.
    assert _run(jobs, "hybrid-histogram:range=600")["warm_hits"] == 5
    # Without the fallback no hold is ever placed: the histogram never opened a window.
    none = _run(jobs, "hybrid-histogram:range=600,fallback=0")
    assert none["warm_hits"] == 0 and none["holds_placed"] == 0
    assert none["mean_time_to_gpu_s"] == COLD
    # With the threshold lowered the window opened at 750 (warm at 850, kept to 1080) serves
    # the job at 1080; the one opened at 1080 (head 0: set aside at once) is never claimed.
    low = _run(jobs, "hybrid-histogram:range=600,fallback=0,cv=0.5")
    assert low["warm_hits"] == 1 and low["holds_placed"] == 2


def test_mostly_out_of_range_gaps_are_not_representative() -> None:
    # Four of the gaps are beyond the range: after 5, 6 and 7 gaps that is more than half.
    jobs = _user_jobs((LONG,) * 4 + (REGULAR,) * 3, duration=60.0)
    ctl = _decisions(HybridHistogram(), jobs)
    assert ctl.holds == []
    assert ctl.retains == [(job.seq, 4 * 3600.0) for job in jobs]
    # In the replay keep-alive serves the three regular gaps; nothing else holds GPUs.
    assert _run(jobs, "hybrid-histogram")["warm_hits"] == 3
    none = _run(jobs, "hybrid-histogram:fallback=0")
    assert none["warm_hits"] == 0 and none["holds_placed"] == 0


def test_exactly_half_out_of_range_is_still_representative() -> None:
    # Control: three of six gaps out of range is not more than half, so the sixth gap opens
    # a window (pre-warm at 1620 s, kept to 2046 s) that the next regular arrival claims.
    jobs = _user_jobs((LONG,) * 3 + (REGULAR,) * 4, duration=60.0)
    ctl = _decisions(HybridHistogram(), jobs)
    start = 3 * LONG + 3 * REGULAR
    assert ctl.holds == [
        (6, pytest.approx(start + 1620.0), pytest.approx(426.0)),
        (7, pytest.approx(start + REGULAR + 1620.0), pytest.approx(426.0)),
    ]
    assert [seq for seq, _ in ctl.retains] == list(range(6))
    result = _run(jobs, "hybrid-histogram:fallback=0")
    assert result["warm_hits"] == 1 and result["holds_placed"] == 1


def test_representative_checks_each_condition() -> None:
    policy = HybridHistogram(range_s=600.0)
    hist = GapHistogram.empty(600.0)
    for gap in PEAKED_GAPS[:4]:
        hist.add(gap)
    assert not policy.representative(hist)  # four samples, fewer than five
    hist.add(30.0)
    assert hist.cv() == pytest.approx(3.0) and policy.representative(hist)
    for _ in range(5):
        hist.add(700.0)  # out of range: five of ten is not more than half
    assert hist.out_of_range == 5 and policy.representative(hist)
    hist.add(700.0)  # six of eleven is
    assert not policy.representative(hist)
