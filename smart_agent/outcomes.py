"""What became of the agent's holds: outcomes fetched from the server, holds cancelled when
no forecast supports them any more (or all of them on a clean stop), idle time counted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from control_plane.schemas.allocations import Allocation, Hold
from predictors.types import Forecast
from smart_agent.client import Client, JitgpuError
from smart_agent.predlog import PredictionLog

log = logging.getLogger("jitgpu.agent")

ENDED = ("expired", "cancelled", "preempted", "failed", "claimed")
CANCEL_GRACE_S = 60  # a hold this young keeps its chance: one quiet cycle is not a verdict
# How far back a claimed hold no job of the log took yet may still be a job's that the
# agent sees only now (a poll later than the backend's claim).
LINK_WINDOW_S = 3600.0

Notify = Callable[[str, dict], None]


class HoldKeeper:
    """Keeps the prediction log's holds in step with the server's view of them."""

    def __init__(
        self, client: Client, log_: PredictionLog, clock: Callable[[], float], notify: Notify
    ) -> None:
        self.client = client
        self.log = log_
        self.clock = clock
        self.notify = notify
        # Allocations whose time-to-GPU will never be known (a cold start without a
        # warm-up): asked about once, not at every reconcile.
        self.unmeasured: set[str] = set()

    def reconcile(self) -> int:
        """Learn what became of pending holds and of jobs whose time-to-GPU was not known."""
        now = self.clock()
        changed = 0
        for row in self.log.pending_holds():
            hold = self._fetch(row["hold_id"], now)
            if hold is not None and hold.status.value in ENDED:
                self._ended(hold, now)
                changed += 1
        for job in self.log.query(
            "SELECT id, allocation_id FROM jobs WHERE allocation_id IS "
            "NOT NULL AND time_to_gpu_s IS NULL"
        ):
            if job["allocation_id"] in self.unmeasured:
                continue
            try:
                alloc = self.client.get_allocation(job["allocation_id"])
            except JitgpuError:
                continue
            if alloc.time_to_gpu_s is None and (
                alloc.ready_at is not None or alloc.status not in ("pending", "allocated")
            ):
                self.unmeasured.add(alloc.id)
            if alloc.time_to_gpu_s is not None:
                self.log.job_update(job["id"], time_to_gpu_s=alloc.time_to_gpu_s)
                self.notify("ready", {"allocation": alloc.id, "time_to_gpu_s": alloc.time_to_gpu_s})
                changed += 1
        return changed

    def claimed_for(self, job_id: int, job_ref: str, now: float) -> Allocation | None:
        """At a job's arrival: settle the pending holds that ended since the last reconcile
        (the cycle that follows must not count them as pending), and return the allocation
        of a hold a scheduler backend (the Slurm bridge) claimed for this very job, labelled
        `job <id>`, now recorded against the job in the log."""
        for row in self.log.pending_holds():
            hold = self._fetch(row["hold_id"], now)
            if hold is not None and hold.status.value in ENDED:
                self._ended(hold, now)
        for row in self.log.unlinked_claims(since=now - LINK_WINDOW_S):
            hold = self._fetch(row["hold_id"], now)
            if hold is None or hold.allocation_id is None:
                continue
            try:
                alloc = self.client.get_allocation(hold.allocation_id)
            except JitgpuError:
                continue
            if alloc.label != f"job {job_ref}":
                continue
            self.log.link_claim(hold.id, job_id)
            self.log.job_update(
                job_id,
                hold_id=hold.id,
                allocation_id=alloc.id,
                warm=alloc.warm,
                time_to_gpu_s=alloc.time_to_gpu_s,
            )
            return alloc
        return None

    def _fetch(self, hold_id: str, now: float) -> Hold | None:
        try:
            return self.client.get_hold(hold_id)
        except JitgpuError as exc:
            if exc.status == 404:
                self.log.hold_outcome(hold_id, outcome="failed", at=now)
            return None

    def _ended(self, hold: Hold, now: float) -> None:
        status = hold.status.value
        ended = hold.ended_at.timestamp() if hold.ended_at else now
        self.log.hold_outcome(
            hold.id,
            outcome=status,
            at=ended,
            idle_gpu_minutes=idle_of(hold, ended),
            claimed_at=ended if status == "claimed" else None,
        )
        self.notify("outcome", {"hold": hold.id, "outcome": status})

    def cancel_unsupported(
        self,
        forecasts: list[Forecast],
        now: float,
        *,
        cancel_below: float,
        unheard: Collection[str] = (),
    ) -> list[str]:
        """Cancel holds not yet due that no current forecast supports any more.

        A hold whose predictor is in `unheard` (it failed this cycle, was rate capped or
        out of budget, or was not asked) is kept: its silence says nothing about the job.
        """
        cancelled = []
        for row in self.log.pending_holds():
            if row["start_at"] <= now or now - row["made_at"] < CANCEL_GRACE_S:
                continue
            if row["predictor"] in unheard:
                log.debug("hold %s kept: %s gave no answer", row["hold_id"], row["predictor"])
                continue
            supported = any(
                f.confidence >= cancel_below
                and f.start_at <= row["end_at"]
                and row["start_at"] <= f.end_at
                for f in forecasts
            )
            if supported:
                continue
            if self._cancel(row["hold_id"], now):
                cancelled.append(row["hold_id"])
                self.notify("cancel", {"hold": row["hold_id"]})
        return cancelled

    def cancel_all(self) -> int:
        """On a clean stop when configured: give back every hold the agent still has."""
        return sum(self._cancel(row["hold_id"], self.clock()) for row in self.log.pending_holds())

    def _cancel(self, hold_id: str, now: float) -> bool:
        try:
            hold = self.client.cancel_hold(hold_id)
        except JitgpuError as exc:
            log.warning("cancel of hold %s failed: %s", hold_id, exc)
            return False
        self.log.hold_outcome(
            hold_id, outcome="cancelled", at=now, idle_gpu_minutes=idle_of(hold, now)
        )
        return True


def idle_minutes(row: dict, now: float, lead_s: float) -> float:
    """A pending hold's idle GPU-minutes so far: from when the server placed it (at the
    latest of its request and its start minus the lead) until now."""
    placed = max(row["made_at"], row["start_at"] - lead_s)
    return max(0.0, now - placed) * (row["hold_gpus"] or 0) / 60.0


def idle_of(hold: Hold, until: float) -> float:
    """GPU-minutes the server says a hold sat placed and unused, until `until`."""
    if hold.placed_at is None:
        return 0.0
    return max(0.0, until - hold.placed_at.timestamp()) * hold.gpu_count / 60.0
