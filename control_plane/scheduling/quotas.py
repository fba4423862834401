"""Tenant quotas: guaranteed and burst GPUs, online/batch shares, and the admission verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from math import floor

from control_plane.schemas.enums import JobClass

QUOTA_EXCEEDED = "quota_exceeded"


class QuotaVerdict(StrEnum):
    ADMIT = "admit"
    BURST = "burst"
    QUEUE = "queue"
    REFUSE = "refuse"


@dataclass(frozen=True)
class TenantQuota:
    """Guaranteed GPUs, extra burst GPUs, and optionally the online class's share (0..1)."""

    quota_gpus: int
    burst_gpus: int = 0
    online_share: float | None = None

    def __post_init__(self) -> None:
        if self.quota_gpus < 0 or self.burst_gpus < 0:
            raise ValueError("quota_gpus and burst_gpus must not be negative")
        if self.online_share is not None and not 0.0 <= self.online_share <= 1.0:
            raise ValueError("online_share must be within 0..1")

    @property
    def limit(self) -> int:
        """The most GPUs the tenant may hold at once (guaranteed + burst)."""
        return self.quota_gpus + self.burst_gpus

    def class_guarantees(self) -> dict[str, int]:
        """Guaranteed GPUs per class (keys are JobClass values); they add up to quota_gpus."""
        if self.online_share is None:
            raise ValueError("this quota has no online/batch split")
        shares = {JobClass.ONLINE: self.online_share, JobClass.BATCH: 1.0 - self.online_share}
        return split_shares(self.quota_gpus, shares)


@dataclass(frozen=True)
class TenantUsage:
    """GPUs a tenant has allocated now, by class."""

    online_gpus: int = 0
    batch_gpus: int = 0

    @property
    def total(self) -> int:
        return self.online_gpus + self.batch_gpus

    def of(self, job_class: JobClass) -> int:
        return self.online_gpus if job_class == JobClass.ONLINE else self.batch_gpus

    def plus(self, gpus: int, job_class: JobClass) -> TenantUsage:
        if job_class == JobClass.ONLINE:
            return TenantUsage(self.online_gpus + gpus, self.batch_gpus)
        return TenantUsage(self.online_gpus, self.batch_gpus + gpus)


@dataclass(frozen=True)
class QuotaDecision:
    verdict: QuotaVerdict
    reason: str
    burst_gpus: int = 0
    """How many of the request's GPUs are above the guarantee (0 unless verdict is burst)."""

    @property
    def admitted(self) -> bool:
        return self.verdict in (QuotaVerdict.ADMIT, QuotaVerdict.BURST)

    @property
    def code(self) -> str | None:
        """Error code for a request that is not admitted now."""
        return None if self.admitted else QUOTA_EXCEEDED


def split_shares(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Split `total` GPUs by shares (largest remainder): the parts always add up to `total`.

    Ties in the remainder go to the larger share, then to the earlier key, so the split is
    deterministic and rounding never strands a GPU.
    """
    if total < 0:
        raise ValueError("total must not be negative")
    keys: Sequence[str] = list(shares)
    weight = sum(shares.values())
    if not keys or weight <= 0:
        raise ValueError("shares must contain a positive weight")
    if any(v < 0 for v in shares.values()):
        raise ValueError("shares must not be negative")
    exact = {k: total * shares[k] / weight for k in keys}
    parts = {k: floor(exact[k]) for k in keys}
    left = total - sum(parts.values())
    order = sorted(
        range(len(keys)),
        key=lambda i: (-(exact[keys[i]] - parts[keys[i]]), -shares[keys[i]], i),
    )
    for i in order[:left]:
        parts[keys[i]] += 1
    return parts


def check_quota(
    quota: TenantQuota,
    usage: TenantUsage,
    gpu_count: int,
    job_class: JobClass = JobClass.BATCH,
    *,
    queue_over_quota: bool = False,
    idle_gpus: int | None = None,
) -> QuotaDecision:
    """May a tenant using `usage` get `gpu_count` more GPUs now?

    Within the guarantee (and, with shares, within its class's share): admit. Above it but
    within quota + burst: admit as burst, which needs idle GPUs when `idle_gpus` is given.
    Beyond quota + burst: refused at once (or queued with `queue_over_quota`), and a request
    that could never fit (larger than quota + burst) is always refused. With shares, a request
    within its class's guarantee that is over the limit only because the other class borrowed
    from that guarantee is queued, never refused: the caller places it once the tenant's
    running GPUs leave room, and meanwhile the borrower gets nothing more (queued requests
    count as usage).
    """
    if gpu_count < 1:
        raise ValueError("gpu_count must be at least 1")
    limit = quota.limit
    limit_text = f"quota {quota.quota_gpus} + burst {quota.burst_gpus} = {limit} GPUs"
    if gpu_count > limit:
        return QuotaDecision(
            QuotaVerdict.REFUSE, f"asks for {gpu_count} GPUs, more than {limit_text} at once"
        )
    over = QuotaVerdict.QUEUE if queue_over_quota else QuotaVerdict.REFUSE
    used = usage.total
    if used + gpu_count > limit:
        lent = _lent_to_other_class(quota, usage, gpu_count, job_class)
        if lent:
            # A class's guarantee is its own: what the other class borrowed comes back to it,
            # so the request waits for those GPUs instead of being refused.
            return QuotaDecision(
                QuotaVerdict.QUEUE,
                f"within the {job_class} guarantee, but {lent} of its GPUs are lent to the "
                "other class: queued until they are returned",
            )
        return QuotaDecision(
            over, f"{used} GPUs in use + {gpu_count} asked would exceed {limit_text}"
        )
    guaranteed = quota.quota_gpus
    within = used + gpu_count <= guaranteed
    if within and quota.online_share is not None:
        share = quota.class_guarantees()[job_class]
        within = usage.of(job_class) + gpu_count <= share
    if within:
        return QuotaDecision(QuotaVerdict.ADMIT, "within the guaranteed quota")
    # GPUs above the tenant's guarantee, or above the class's share (borrowed from the other
    # class), whichever is more: all of them are burst.
    burst = used + gpu_count - guaranteed
    if quota.online_share is not None:
        share = quota.class_guarantees()[job_class]
        burst = max(burst, usage.of(job_class) + gpu_count - share)
    burst = min(gpu_count, burst)
    if idle_gpus is not None and idle_gpus < gpu_count:
        return QuotaDecision(
            over, f"burst of {burst} GPUs needs idle GPUs: {idle_gpus} idle, {gpu_count} asked"
        )
    return QuotaDecision(
        QuotaVerdict.BURST, f"{burst} of {gpu_count} GPUs above the guarantee, as burst", burst
    )


def _lent_to_other_class(
    quota: TenantQuota, usage: TenantUsage, gpu_count: int, job_class: JobClass
) -> int:
    """GPUs of `job_class`'s guarantee that the other class uses now, when the request fits
    that guarantee; 0 otherwise (no split, or the request is beyond its class's share)."""
    if quota.online_share is None:
        return 0
    guarantees = quota.class_guarantees()
    if usage.of(job_class) + gpu_count > guarantees[job_class]:
        return 0
    other = JobClass.BATCH if job_class == JobClass.ONLINE else JobClass.ONLINE
    return max(0, usage.of(other) - guarantees[other])
