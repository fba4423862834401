"""The one registry of periodic jobs; each is idempotent and runs as a command of the writer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.services import evacuate, periodic
from control_plane.services.writer import GroupWriter

IDEMPOTENCY_KEEP_S = 86400.0


@dataclass(frozen=True)
class Job:
    name: str
    run: Callable[[GroupWriter, ServerSettings, float], int]
    every: float = 1.0  # in units of settings.jobs_interval_s
    # Wait one heartbeat timeout after this replica becomes the leader: if the whole control
    # plane was down, no heartbeat could arrive, and silence would be the server's own.
    after_election_grace: bool = False
    # Skipped while the server itself could not take heartbeats, and for one heartbeat
    # timeout after (see jobs/stalls.py).
    stall_aware: bool = False


def liveness(writer: GroupWriter, settings: ServerSettings, now: float) -> int:
    """Silent nodes go offline: their allocations are lost, their holds re-placed or failed."""
    return writer.run_from_thread(
        lambda session: evacuate.take_silent_nodes_offline(
            session, now=now, timeout_s=settings.heartbeat_timeout_s
        )
    )


def hold_lifecycle(writer: GroupWriter, settings: ServerSettings, now: float) -> int:
    """Expire what is past its time, place holds whose lead time began, serve the queue."""
    return writer.run_from_thread(lambda session: periodic.expire_and_activate(session, now=now))


def retention(writer: GroupWriter, settings: ServerSettings, now: float) -> int:
    """Prune events past the retention age and idempotency records past a day."""
    return writer.run_from_thread(
        lambda session: periodic.prune(
            session,
            now=now,
            events_older_than_s=settings.retention_days * 86400,
            keys_older_than_s=IDEMPOTENCY_KEEP_S,
        )
    )


JOBS: tuple[Job, ...] = (
    Job("liveness", liveness, after_election_grace=True, stall_aware=True),
    Job("hold_lifecycle", hold_lifecycle),
    Job("retention", retention, every=300.0),
)


def run_all(db: Database, settings: ServerSettings, now: float) -> dict[str, int]:
    """Run every job once (tests and `jitgpu` tooling call this with a fixed `now`), through a
    writer of its own that is stopped again before returning."""
    writer = GroupWriter(db, clock=lambda: now)
    try:
        return {job.name: job.run(writer, settings, now) for job in JOBS}
    finally:
        writer.stop()
