"""Quotas: guaranteed and burst GPUs, online/batch shares, verdicts and reasons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control_plane.scheduling.quotas import (
    QUOTA_EXCEEDED,
    QuotaVerdict,
    TenantQuota,
    TenantUsage,
    check_quota,
    split_shares,
)
from control_plane.schemas.enums import JobClass


def test_third_gpu_over_a_quota_of_two_without_burst_is_refused_at_once() -> None:
    quota = TenantQuota(quota_gpus=2, burst_gpus=0)
    assert check_quota(quota, TenantUsage(batch_gpus=1), 1).verdict == QuotaVerdict.ADMIT
    decision = check_quota(quota, TenantUsage(batch_gpus=2), 1)
    assert decision.verdict == QuotaVerdict.REFUSE
    assert not decision.admitted
    assert decision.code == QUOTA_EXCEEDED
    assert "2 GPUs in use" in decision.reason and "quota 2 + burst 0" in decision.reason


def test_over_quota_can_be_queued_instead() -> None:
    quota = TenantQuota(2)
    decision = check_quota(quota, TenantUsage(batch_gpus=2), 1, queue_over_quota=True)
    assert decision.verdict == QuotaVerdict.QUEUE
    assert decision.code == QUOTA_EXCEEDED


def test_request_larger_than_quota_plus_burst_is_refused_even_when_queueing() -> None:
    decision = check_quota(TenantQuota(4, 2), TenantUsage(), 7, queue_over_quota=True)
    assert decision.verdict == QuotaVerdict.REFUSE
    assert "more than" in decision.reason


def test_burst_admits_above_the_guarantee_and_counts_the_burst_gpus() -> None:
    quota = TenantQuota(4, 4)
    decision = check_quota(quota, TenantUsage(batch_gpus=3), 3)
    assert decision.verdict == QuotaVerdict.BURST
    assert decision.admitted and decision.code is None
    assert decision.burst_gpus == 2
    assert check_quota(quota, TenantUsage(batch_gpus=6), 3).verdict == QuotaVerdict.REFUSE


def test_burst_needs_idle_gpus_when_the_caller_says_how_many() -> None:
    quota = TenantQuota(2, 4)
    assert check_quota(quota, TenantUsage(batch_gpus=2), 2, idle_gpus=2).admitted
    decision = check_quota(quota, TenantUsage(batch_gpus=2), 2, idle_gpus=1)
    assert decision.verdict == QuotaVerdict.REFUSE
    assert "idle" in decision.reason
    # Guaranteed GPUs do not depend on idle capacity.
    assert check_quota(quota, TenantUsage(), 2, idle_gpus=0).verdict == QuotaVerdict.ADMIT


def test_online_batch_shares_guarantee_each_class_its_part() -> None:
    quota = TenantQuota(10, 0, online_share=0.7)
    assert quota.class_guarantees() == {"online": 7, "batch": 3}
    usage = TenantUsage(online_gpus=0, batch_gpus=3)
    assert check_quota(quota, usage, 7, JobClass.ONLINE).verdict == QuotaVerdict.ADMIT
    # Batch over its share borrows online's unused part: admitted, but only as burst.
    borrowed = check_quota(quota, usage, 2, JobClass.BATCH)
    assert borrowed.verdict == QuotaVerdict.BURST and borrowed.burst_gpus == 2
    full = TenantUsage(online_gpus=7, batch_gpus=3)
    assert check_quota(quota, full, 1, JobClass.ONLINE).verdict == QuotaVerdict.REFUSE


def test_gpus_above_the_class_share_are_burst_also_when_over_the_quota() -> None:
    quota = TenantQuota(10, 5, online_share=0.7)  # online 7, batch 3
    decision = check_quota(quota, TenantUsage(online_gpus=2), 10, JobClass.BATCH)
    # Batch gets 10: 3 of its own share, 5 borrowed from online's unused share, 2 over the
    # quota. All 7 above its share are burst, not only the 2 above the quota.
    assert decision.verdict == QuotaVerdict.BURST and decision.burst_gpus == 7


def test_a_class_within_its_guarantee_queues_for_what_the_other_class_borrowed() -> None:
    quota = TenantQuota(10, 0, online_share=0.7)
    # Online took its 7 and borrowed 2 of batch's 3 while batch was idle.
    usage = TenantUsage(online_gpus=9, batch_gpus=0)
    decision = check_quota(quota, usage, 3, JobClass.BATCH)
    assert decision.verdict == QuotaVerdict.QUEUE
    assert "2 of its GPUs are lent" in decision.reason
    # Batch's own guarantee fits in what is left: admitted at once.
    assert check_quota(quota, usage, 1, JobClass.BATCH).verdict == QuotaVerdict.ADMIT
    # Beyond batch's guarantee nothing is owed to it: refused as before.
    assert check_quota(quota, usage, 4, JobClass.BATCH).verdict == QuotaVerdict.REFUSE
    # The borrower gets nothing more while batch waits (the queued 3 count as usage).
    waiting = TenantUsage(online_gpus=9, batch_gpus=3)
    assert check_quota(quota, waiting, 1, JobClass.ONLINE).verdict == QuotaVerdict.REFUSE
    # Without a split there is nothing to reclaim.
    assert check_quota(TenantQuota(10), TenantUsage(9), 3).verdict == QuotaVerdict.REFUSE


def test_share_rounding_never_strands_a_gpu() -> None:
    assert split_shares(5, {"online": 0.7, "batch": 0.3}) == {"online": 4, "batch": 1}
    assert split_shares(3, {"a": 1, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}
    assert split_shares(1, {"a": 0.5, "b": 0.5}) == {"a": 1, "b": 0}
    assert sum(TenantQuota(7, 0, 0.7).class_guarantees().values()) == 7


@given(
    total=st.integers(0, 10_000),
    shares=st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0.01, 100), min_size=1),
)
def test_split_shares_adds_up_and_stays_within_one_of_exact(
    total: int, shares: dict[str, float]
) -> None:
    parts = split_shares(total, shares)
    assert sum(parts.values()) == total
    weight = sum(shares.values())
    for key, part in parts.items():
        assert abs(part - total * shares[key] / weight) < 1.0 + 1e-9


def test_invalid_quotas_and_requests_are_errors() -> None:
    with pytest.raises(ValueError):
        TenantQuota(-1)
    with pytest.raises(ValueError):
        TenantQuota(2, 0, online_share=1.5)
    with pytest.raises(ValueError):
        check_quota(TenantQuota(2), TenantUsage(), 0)
    with pytest.raises(ValueError):
        TenantQuota(2).class_guarantees()
