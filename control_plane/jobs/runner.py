"""Runs the registered jobs on APScheduler, only while this replica holds the leader lease."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs.registry import JOBS, Job
from control_plane.jobs.stalls import StallWatch
from control_plane.services import leases
from control_plane.services.writer import GroupWriter

log = logging.getLogger("jitgpu.jobs")


class JobRunner:
    """One scheduler per replica; the lease decides which replica's jobs do anything.

    The lease lasts 1.5 intervals and is renewed every half interval, so a dead leader is
    replaced within two intervals.
    """

    def __init__(
        self,
        db: Database,
        *,
        settings: ServerSettings,
        clock: Callable[[], float],
        watch: StallWatch | None = None,
        writer: GroupWriter | None = None,
    ) -> None:
        self.db = db
        # The server's writer, so that a job's work takes its turn with the requests' commands;
        # alone (tests, tools), a writer of its own.
        self.writer = writer if writer is not None else GroupWriter(db, clock)
        self._own_writer = writer is None
        self.watch = watch
        self.settings = settings
        self.clock = clock
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.interval = settings.jobs_interval_s
        self.lease_ttl = 1.5 * self.interval
        self._leader_until = 0.0
        self._leader_since: float | None = None
        self._lock = threading.Lock()
        self._warned_sqlite = False
        self._scheduler = BackgroundScheduler(daemon=True)

    @property
    def is_leader(self) -> bool:
        return self.clock() < self._leader_until

    def start(self) -> None:
        if self.watch is not None:
            self.watch.expect("job thread", self.interval / 2)
        self._scheduler.add_job(
            self.renew,
            "interval",
            seconds=self.interval / 2,
            id="lease",
            max_instances=1,
            coalesce=True,
        )
        for job in JOBS:
            self._scheduler.add_job(
                self._run,
                "interval",
                args=[job],
                seconds=job.every * self.interval,
                id=job.name,
                max_instances=1,
                coalesce=True,
            )
        self.renew()
        self._scheduler.start()

    def stop(self) -> None:
        self._scheduler.shutdown(wait=True)
        if self._own_writer:
            self.writer.stop()
        if self.is_leader:
            try:
                leases.release(self.db, holder=self.holder)
            except Exception:  # the database may already be gone at shutdown
                log.warning("could not release the jobs lease", exc_info=True)

    def renew(self) -> None:
        if self.watch is not None:
            self.watch.beat("job thread")
        now = self.clock()
        try:
            # By the database's clock: this replica's own may be off.
            won = leases.acquire(self.db, holder=self.holder, ttl_s=self.lease_ttl)
        except Exception:
            log.warning("jobs lease: database unavailable", exc_info=True)
            won = False
        with self._lock:
            was = self._leader_until > now
            self._leader_until = now + self.lease_ttl if won else 0.0
            if won and not was:
                self._leader_since = now
            elif not won:
                self._leader_since = None
        if won and not was:
            log.info("this replica (%s) now runs the periodic jobs", self.holder)
        elif not won and self.db.is_sqlite and not self._warned_sqlite:
            self._warned_sqlite = True
            self._explain_sqlite_lease(now)

    def _explain_sqlite_lease(self, now: float) -> None:
        """Say who holds the lease and until when: after a kill -9 and a quick restart it is
        the previous run's, which is no second server and needs nothing but waiting."""
        try:
            held = leases.holder_of(self.db)
            # The lease ends by the database's clock; say how long that is from its now.
            now = leases.database_now(self.db)
        except Exception:
            held = None
        if held is None:
            log.warning(
                "another server seems to run the jobs on this SQLite file; SQLite supports one "
                "replica only: use PostgreSQL for several"
            )
            return
        holder, until = held
        when = datetime.fromtimestamp(until, tz=UTC).isoformat(timespec="seconds")
        wait = max(0.0, until - now)
        if _left_by_a_dead_process(holder):
            log.info(
                "the jobs lease on this SQLite file was left by a previous run (%s, no longer "
                "running); it expires at %s (in %.1fs) and this server runs the jobs from then",
                holder,
                when,
                wait,
            )
            return
        log.warning(
            "a jobs lease on this SQLite file is held until %s (in %.1fs) by %s; if no other "
            "server uses this file it was left by a previous run and this server takes the "
            "jobs over when it expires. SQLite supports one replica only: use PostgreSQL for "
            "several",
            when,
            wait,
            holder,
        )

    def _run(self, job: Job) -> None:
        if not self.is_leader:
            return
        since = self._leader_since
        now = self.clock()
        if job.after_election_grace and (
            since is None or now - since < self.settings.heartbeat_timeout_s
        ):
            return
        if job.stall_aware and self.watch is not None:
            left = self.watch.grace_left(self.settings.heartbeat_timeout_s)
            if left > 0:
                log.info("job %s waits %.1fs more: the server itself stalled", job.name, left)
                return
        try:
            changed = job.run(self.writer, self.settings, now)
        except Exception:
            log.exception("job %s failed", job.name)
            return
        if changed:
            log.info("job %s: %d change(s)", job.name, changed)


def _left_by_a_dead_process(holder: str) -> bool:
    """True when the holder ("host:pid:tag") names a process of this host that is gone."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False  # another host, or a holder written some other way: cannot tell
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive but not ours to signal
        return False
    return False
