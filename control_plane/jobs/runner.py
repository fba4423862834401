"""Runs the registered jobs on APScheduler, only while this replica holds the leader lease."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.jobs import leader
from control_plane.jobs.registry import JOBS, Job

log = logging.getLogger("jitgpu.jobs")


class JobRunner:
    """One scheduler per replica; the lease decides which replica's jobs do anything.

    The lease lasts 1.5 intervals and is renewed every half interval, so a dead leader is
    replaced within two intervals.
    """

    def __init__(
        self, db: Database, *, settings: ServerSettings, clock: Callable[[], float]
    ) -> None:
        self.db = db
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
        if self.is_leader:
            try:
                leader.release(self.db, holder=self.holder)
            except Exception:  # the database may already be gone at shutdown
                log.warning("could not release the jobs lease", exc_info=True)

    def renew(self) -> None:
        now = self.clock()
        try:
            won = leader.acquire(self.db, holder=self.holder, now=now, ttl_s=self.lease_ttl)
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
            log.warning(
                "another server runs jobs on this SQLite file; SQLite supports one "
                "replica only: use PostgreSQL for several"
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
        try:
            changed = job.run(self.db, self.settings, now)
        except Exception:
            log.exception("job %s failed", job.name)
            return
        if changed:
            log.info("job %s: %d change(s)", job.name, changed)
