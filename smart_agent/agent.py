"""The agent's core: events in, forecasts through the policy, holds made, claimed and scored.

Single-threaded by design: the runner feeds it events and ticks from one queue, so nothing
here needs a lock. Every network failure becomes a logged outcome, never a crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from control_plane.schemas.allocations import Allocation, Hold
from predictors import HistoryBuilder
from predictors.context import Context
from predictors.types import Event, EventKind, Forecast
from smart_agent.client import Client, JitgpuError
from smart_agent.decide import Decision, HeldWindow, PolicyState, decide, wire_gpu_model
from smart_agent.idle_steer import IdleSteer
from smart_agent.job_cap import JobGpuCap
from smart_agent.open_jobs import OpenJob, mark_listed, mark_seen, renew_due
from smart_agent.outcomes import HoldKeeper, Notify, idle_minutes, idle_of
from smart_agent.policy import Policy
from smart_agent.predictor_set import PredictorSet
from smart_agent.predlog import PredictionLog, context_summary

log = logging.getLogger("jitgpu.agent")

ARRIVALS = (EventKind.JOB_SUBMITTED, EventKind.JOB_STARTED)
ARRIVAL_MAX_AGE_S = 120.0
JOB_LEASE_S = 6 * 3600  # a job the agent never sees end gives its GPUs back after this
CLAIM_ORDER = {"ready": 0, "warming": 1, "placed": 2, "requested": 3}


@dataclass
class CycleReport:
    forecasts: list[Forecast] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


class Agent:
    """Turns one user's events into holds and claims, within the pre-warm policy."""

    def __init__(
        self,
        *,
        user: str,
        policy: Policy,
        client: Client,
        log_: PredictionLog,
        predictors: PredictorSet,
        clock: Callable[[], float] = time.time,
        lease_s: int | None = JOB_LEASE_S,
        allocate_on_miss: bool = False,
        notify: Notify | None = None,
        arrival_max_age_s: float = ARRIVAL_MAX_AGE_S,
        max_job_gpus: int | None = None,
    ) -> None:
        self.user = user
        self.policy = policy
        self.client = client
        self.log = log_
        self.predictors = predictors
        self.clock = clock
        self.lease_s = lease_s
        self.allocate_on_miss = allocate_on_miss
        self.notify: Notify = notify or (lambda kind, data: None)
        self.arrival_max_age_s = arrival_max_age_s
        # The most GPUs one job may claim or allocate, or a forecast hold: a misread count
        # (512 from one row) is clamped here, before any request is sent. None: the largest
        # count among the user's own jobs seen so far (see job_gpu_cap).
        self.job_cap = JobGpuCap(max_job_gpus)
        # Jobs from before this moment (processes already running, a backfilled history)
        # are history, not arrivals: they must neither claim a hold nor allocate now.
        self.started_at = clock()
        self.agent_id = log_.agent_id()
        self.holds = HoldKeeper(client, log_, clock, self.notify)
        self.history = HistoryBuilder()
        self._open_jobs: dict[str, OpenJob] = {}
        self._last_cue: str | None = None
        self.steer: IdleSteer | None = None

    # --- events ----------------------------------------------------------------------
    def observe(self, event: Event) -> None:
        """Learn from an event; a job arriving claims a hold, a job ending releases its GPUs."""
        self.history.observe(event)
        if event.kind == EventKind.CUE:
            self._last_cue = event.cue
        if event.user != self.user:
            return
        mark_seen(self._open_jobs, event, self.clock())
        # The cap a job is held to comes from the jobs seen before it, not from itself.
        cap = self.job_gpu_cap()
        if event.kind in (*ARRIVALS, EventKind.JOB_FINISHED):
            self.job_cap.see(event.gpus)
        if event.kind in ARRIVALS:
            key = event.job_id or f"{event.source}:{event.at}"
            known = self._open_jobs.get(key)
            if known is None and self._is_arrival(event):
                self._open_jobs[key] = self._arrive(event, cap=cap)
            elif (
                known is not None and known.gpus is None and event.gpus and self._is_arrival(event)
            ):
                # `Submitted batch job N` first, the job's GPUs from its record later.
                self._open_jobs[key] = self._arrive(event, cap=cap, log_id=known.log_id)
        elif event.kind == EventKind.JOB_FINISHED and event.job_id in self._open_jobs:
            self._finish(self._open_jobs.pop(event.job_id))

    def job_gpu_cap(self) -> tuple[int, str]:
        """The most GPUs one job (or a forecast hold) may ask for, and where that comes from."""
        return self.job_cap.limit(self.policy.max_gpus_total)

    def _is_arrival(self, event: Event) -> bool:
        """A job arriving now, not one a backfill, a rewritten history file or a process
        running before the agent started reports late: those only teach the history."""
        oldest = max(self.clock() - self.arrival_max_age_s, self.started_at)
        if event.at >= oldest:
            return True
        log.debug("job %s at %.0f is history, not an arrival", event.job_id, event.at)
        return False

    def _arrive(self, event: Event, *, cap: tuple[int, str], log_id: int | None = None) -> OpenJob:
        now = self.clock()
        job_id = log_id
        if job_id is None:
            job_id = self.log.job(
                at=event.at,
                user=event.user,
                gpus=event.gpus,
                gpu_model=event.gpu_model,
                source=event.source,
                job_ref=event.job_id,
            )
        if not event.gpus:
            # No GPU evidence (a bare `Submitted batch job N`) or a CPU job: it takes no
            # hold made for another job and allocates nothing.
            log.debug("job %s: no GPUs known, nothing claimed", event.job_id)
            return OpenJob(job_id, None, None if event.gpus is None else 0)
        key = event.job_id or f"{event.source}:{event.at}"
        gpus = self.job_cap.clamp(key, event.job_id, event.gpus, cap)
        # A hold the Slurm bridge already claimed for this job (it ran in the reservation
        # before this poll saw it): recorded as the job's; the bridge releases it.
        taken = None if event.job_id is None else self.holds.claimed_for(job_id, event.job_id, now)
        best = None if taken else self._best_hold(gpus, event.gpu_model)
        hold = best[0] if best else ({"hold_id": taken.hold_id} if taken else None)
        alloc: Allocation | None = taken
        try:
            if taken is not None:
                pass
            elif best is not None:
                row, current = best
                alloc = self.client.claim(
                    row["hold_id"],
                    gpu_count=_claim_size(gpus, current.gpu_count),
                    lease_s=self.lease_s,
                    idempotency_key=f"claim:{row['hold_id']}",
                )
                # Idle until now on all the hold's GPUs; the ones the job did not take were
                # released by the claim itself, so they are never idle after it.
                self.log.hold_outcome(
                    row["hold_id"],
                    outcome="claimed",
                    at=now,
                    claimed_at=now,
                    job_id=job_id,
                    idle_gpu_minutes=idle_of(current, now),
                )
            elif self.allocate_on_miss:
                model = event.gpu_model or self.policy.gpu_model
                alloc = self.client.allocate(
                    gpus,
                    gpu_model=wire_gpu_model(model, self.policy.gpu_model),
                    lease_s=self.lease_s,
                    use_holds=False,
                    warmup=self.policy.warmup_for(model),
                    idempotency_key=f"job:{self.agent_id}:{job_id}",
                )
        except JitgpuError as exc:
            log.warning("job %s: could not get GPUs: %s", event.job_id, exc)
        if alloc is not None:
            self.log.job_update(
                job_id,
                allocation_id=alloc.id,
                hold_id=alloc.hold_id,
                warm=alloc.warm,
                time_to_gpu_s=alloc.time_to_gpu_s,
            )
        self.notify(
            "job",
            {
                "job": event.job_id,
                "gpus": gpus,
                "hold": hold["hold_id"] if hold else None,
                "allocation": alloc.id if alloc else None,
                "warm": bool(alloc and alloc.warm),
                "time_to_gpu_s": alloc.time_to_gpu_s if alloc else None,
            },
        )
        return OpenJob(
            job_id,
            alloc.id if alloc and not taken else None,
            event.gpus,
            # A job without an id is known by its source (its log) only.
            source=event.source if event.job_id is None else None,
            seen_at=now,
            leased_at=now,
        )

    def _best_hold(self, gpus: int | None, model: str | None) -> tuple[dict, Hold] | None:
        """The agent's hold a job should take (the readiest that fits it, the smallest of
        those), with its state; the claim takes only the job's GPUs from a bigger one."""
        candidates = []
        for row in self.log.pending_holds():
            if gpus is not None and (row["hold_gpus"] or 0) < gpus:
                continue
            if model is not None and row["gpu_model"] not in (None, model):
                continue
            try:
                current = self.client.get_hold(row["hold_id"])
            except JitgpuError:
                continue
            rank = CLAIM_ORDER.get(current.status.value)
            if rank is not None:
                candidates.append((rank, row["hold_gpus"] or 0, row["id"], row, current))
        if not candidates:
            return None
        best = min(candidates, key=lambda c: c[:3])
        return best[3], best[4]

    def _finish(self, job: OpenJob) -> None:
        self.log.job_update(job.log_id, ended_at=self.clock())
        if job.allocation_id is None:
            return
        try:
            self.client.release(job.allocation_id)
        except JitgpuError as exc:
            log.warning("release of %s failed: %s", job.allocation_id, exc)

    # --- leases (smart_agent/open_jobs.py) -----------------------------------------------
    def seen_alive(self, job_ids: Iterable[str]) -> None:
        """A source that lists running jobs (the Slurm poll) still lists these."""
        mark_listed(self._open_jobs, job_ids, self.clock())

    def renew_leases(self) -> int:
        """Renew the leases due (see open_jobs.renew_due); how many were renewed."""
        if self.lease_s is None:
            return 0
        return renew_due(self._open_jobs, self.client, lease_s=self.lease_s, now=self.clock())

    # --- cycles ----------------------------------------------------------------------
    def cycle(self, *, trigger: str, cue: str | None = None) -> CycleReport:
        """Forecast, decide every forecast under the policy, request the holds it allows."""
        now = self.clock()
        context = self.history.context(self.user, now)
        cue = cue or _pending_cue(context) or (self._last_cue if trigger == "cue" else None)
        cue = None if cue is None else str(cue)
        report = CycleReport()
        self._steer(now)
        report.forecasts = self.predictors.predict(context, now)
        cycle_id = self.log.cycle(
            at=now, user=self.user, trigger=trigger, cue=cue, context=context_summary(context)
        )
        for member, forecasts in self.predictors.shadow().items():
            for f in forecasts:
                self.log.forecast(
                    f,
                    cycle_id=cycle_id,
                    made_at=now,
                    user=self.user,
                    decision="shadow",
                    reason=f"{member} in shadow",
                    cue=cue,
                )
        state = self.policy_state(now)
        job_cap = self.job_gpu_cap()
        for forecast in report.forecasts:
            decision = decide(self.policy, forecast, now=now, state=state, cue=cue, job_cap=job_cap)
            report.decisions.append(decision)
            fid = self.log.forecast(
                forecast,
                cycle_id=cycle_id,
                made_at=now,
                user=self.user,
                decision="accepted" if decision.accepted else "rejected",
                reason=decision.reason,
                cue=cue,
            )
            self.notify(
                "forecast",
                {
                    "predictor": forecast.predictor,
                    "gpus": forecast.gpu_count,
                    "in_s": round(forecast.start_at - now),
                    "confidence": round(forecast.confidence, 2),
                    "decision": decision.reason,
                },
            )
            if decision.accepted and decision.intent is not None:
                hold_id = self._request(decision, fid, now)
                if hold_id is not None:
                    report.holds.append(hold_id)
                    intent = decision.intent
                    state.held_gpus += intent.gpu_count
                    state.windows.append(
                        HeldWindow(
                            intent.start_at,
                            intent.start_at + intent.ttl_s,
                            intent.gpu_count,
                            intent.gpu_model,
                        )
                    )
                    if cue is not None:
                        state.last_hold_at[cue] = now
        report.cancelled = self.holds.cancel_unsupported(
            report.forecasts,
            now,
            cancel_below=self.policy.cancel_below,
            unheard=self.predictors.unheard(),
        )
        return report

    def _steer(self, now: float) -> None:
        """With an idle budget, move the priced forecast's price by what was realised."""
        budget = self.policy.idle_budget
        if budget is None:
            self.steer = None
            return
        if self.steer is None or self.steer.budget != budget:
            self.steer = IdleSteer(budget, lead_s=self.policy.lead_s)
        self.steer.step(self.log, now, self.predictors.priced())

    def _request(self, decision: Decision, forecast_id: int, now: float) -> str | None:
        intent = decision.intent
        assert intent is not None
        try:
            hold = self.client.hold(
                intent.gpu_count,
                ttl_s=intent.ttl_s,
                start_in_s=max(0.0, intent.start_at - now),
                lead_s=intent.lead_s,
                confidence=intent.confidence,
                gpu_model=wire_gpu_model(intent.gpu_model, self.policy.gpu_model),
                warmup=intent.warmup,
                source="agent",
                idempotency_key=f"forecast:{self.agent_id}:{forecast_id}",
            )
        except JitgpuError as exc:
            # The server's budget wins over the local policy: record why, request nothing more.
            self.log.hold_refused(forecast_id, reason=f"server: {exc.code}: {exc.message}", at=now)
            self.notify("refused", {"code": exc.code, "message": exc.message})
            return None
        self.log.hold_made(forecast_id, hold_id=hold.id, gpus=hold.gpu_count)
        self.notify(
            "hold",
            {
                "hold": hold.id,
                "gpus": hold.gpu_count,
                "status": hold.status.value,
                "start_in_s": round(intent.start_at - now),
            },
        )
        return hold.id

    # --- outcomes --------------------------------------------------------------------
    def reconcile(self) -> int:
        """Learn what became of pending holds and of jobs whose time-to-GPU was not known;
        renew the leases of jobs still alive."""
        self.renew_leases()
        return self.holds.reconcile()

    def cancel_all(self) -> int:
        """On a clean stop when configured: give back every hold the agent still has."""
        return self.holds.cancel_all()

    def policy_state(self, now: float) -> PolicyState:
        pending = self.log.pending_holds()
        idle = self.log.idle_gpu_hours_since(self.policy.day_start(now))
        lead = self.policy.lead_s
        idle += sum(idle_minutes(row, now, lead) for row in pending) / 60.0
        last: dict[str, float] = {}
        for row in self.log.query(
            "SELECT cue, MAX(made_at) AS at FROM forecasts WHERE hold_id "
            "IS NOT NULL AND cue IS NOT NULL GROUP BY cue"
        ):
            last[row["cue"]] = row["at"]
        return PolicyState(
            held_gpus=sum(row["hold_gpus"] or 0 for row in pending),
            idle_gpu_hours_today=idle,
            last_hold_at=last,
            windows=[
                HeldWindow(r["start_at"], r["end_at"], r["hold_gpus"] or 0, r["gpu_model"])
                for r in pending
            ],
        )


def _claim_size(job_gpus: int | None, hold_gpus: int) -> int | None:
    """How many of a hold's GPUs a job takes: what it asked for, when known and fewer than
    the hold has (the rest go back at once); otherwise all of them (None)."""
    if job_gpus is not None and 0 < job_gpus < hold_gpus:
        return job_gpus
    return None


def _pending_cue(context: Context) -> str | None:
    """The cue driving a cycle that no cue triggered (a timer, a burst closing): the latest
    one no job has followed yet, so its cooldown holds whatever runs the cycle."""
    pending = context.history.cue_pending
    return max(pending, key=lambda name: pending[name]) if pending else None
