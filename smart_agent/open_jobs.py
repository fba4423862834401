"""The jobs the agent has seen arrive and not yet end, and the leases of their allocations."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from predictors.types import Event, EventKind
from smart_agent.client import Client, JitgpuError

log = logging.getLogger("jitgpu.agent")


@dataclass
class OpenJob:
    log_id: int
    allocation_id: str | None
    gpus: int | None = None  # None: no GPU evidence yet (a later event of the job may say)
    source: str | None = None  # for a job without an id: the log that tells of it
    seen_at: float = 0.0  # the last sign of life (an event of the job, a poll listing it)
    leased_at: float = 0.0  # when its allocation's lease was last set (made or renewed)


def mark_seen(jobs: dict[str, OpenJob], event: Event, now: float) -> None:
    """An event of an open job (by id; for a job without one, by its source, a log file
    that is still being written) says the job is still there."""
    if event.kind == EventKind.JOB_FINISHED:
        return
    for key, job in jobs.items():
        by_source = event.job_id is None and job.source is not None
        if key == event.job_id or (by_source and job.source == event.source):
            job.seen_at = now


def mark_listed(jobs: dict[str, OpenJob], job_ids: Iterable[str], now: float) -> None:
    """A source that lists running jobs (the Slurm poll) still lists these."""
    for job_id in job_ids:
        job = jobs.get(job_id)
        if job is not None:
            job.seen_at = now


def renew_due(jobs: dict[str, OpenJob], client: Client, *, lease_s: int, now: float) -> int:
    """Renew the lease of each open job's allocation once half of it has run, if the job was
    seen alive since it was last set; a job gone silent keeps its lease, which ends by
    itself. Returns how many were renewed."""
    renewed = 0
    for key, job in jobs.items():
        if job.allocation_id is None or job.seen_at <= job.leased_at:
            continue
        if now - job.leased_at < lease_s / 2:
            continue
        try:
            client.renew(job.allocation_id, lease_s=lease_s)
        except JitgpuError as exc:
            log.warning("job %s: lease of %s not renewed: %s", key, job.allocation_id, exc)
            if exc.status in (404, 409):
                job.allocation_id = None  # ended (expired, released): nothing to renew
            continue
        job.leased_at = now
        renewed += 1
    return renewed
