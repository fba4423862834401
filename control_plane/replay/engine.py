"""Discrete-event replay of a job trace through the scheduling core, in virtual time."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from control_plane.replay.holds import Hold, HoldBook, Intent
from control_plane.replay.metrics import Recorder, classify_miss, is_day_start
from control_plane.replay.policies import Policy
from control_plane.replay.trace import Job
from control_plane.replay.user_totals import UserLedger
from control_plane.scheduling.cluster import ClusterState, uniform_cluster
from control_plane.scheduling.fairshare import (
    DEFAULT_AGING_S,
    DEFAULT_HALF_LIFE_S,
    DecayedUsage,
    PendingView,
    fair_share_factors,
    order_pending,
    pick_next,
)
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import (
    SpeculativeBudget,
    check_hold_budget,
    choose_preemptions,
)
from predictors.budget import Totals

# Event kinds, in the order they run at one instant: GPUs come back first, holds are placed
# before jobs arrive (so a hold due now can be claimed now), expiry comes after arrivals (a
# hold is claimable up to and including its expiry time), ticks last.
FINISH, PLACE, ARRIVAL, EXPIRE, TICK = range(5)

ArrivalInfo = tuple[float | None, int]  # (gap since the user's previous arrival, GPUs set aside)


@dataclass(frozen=True, slots=True)
class SimConfig:
    capacity: int
    gpus_per_node: int = 8
    nodes_per_leaf: int = 4
    cold_start_s: float = 120.0
    backfill: bool = False
    max_held_gpus_per_user: int | None = None
    half_life_s: float = DEFAULT_HALF_LIFE_S
    aging_s: float = DEFAULT_AGING_S


class Simulator:
    """One policy over one trace. `run()` returns the metrics; the instance is the Control."""

    def __init__(self, jobs: Sequence[Job], policy: Policy, config: SimConfig) -> None:
        if config.cold_start_s < 0:
            raise ValueError("cold start must not be negative")
        self.config = config
        self.policy = policy
        self.state = ClusterState.build(
            uniform_cluster(config.capacity, config.gpus_per_node, config.nodes_per_leaf)
        )
        self.rec = Recorder()
        self.book = HoldBook(self.state, self.rec)
        self.jobs = [j for j in jobs if j.gpus <= config.capacity]
        self.rec.jobs_skipped = len(jobs) - len(self.jobs)
        self._cold = float(config.cold_start_s)
        # Virtual time starts one cold start before the first arrival, so that a policy could
        # have that job warm.
        self._now = self.jobs[0].submit - self._cold if self.jobs else 0.0
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._queues: dict[str, deque[Job]] = {}
        self._queued = 0
        self._arrival_info: dict[int, ArrivalInfo] = {}
        self._running: dict[int, list[str]] = {}
        self.users = UserLedger()
        self._last_arrival: dict[str, float] = {}
        self._usage: dict[str, DecayedUsage] = {}
        self._usage_total = DecayedUsage()
        self._finishing: tuple[Job, list[str]] | None = None
        self._done = 0
        limit = config.max_held_gpus_per_user
        self._budget = None if limit is None else SpeculativeBudget(limit)

    # -- Control, as policies see it ---------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    @property
    def cold_start_s(self) -> float:
        return self._cold

    def hold(self, user: str, gpus: int, at: float, ttl_s: float, confidence: float = 1.0) -> None:
        if gpus != int(gpus):
            raise ValueError("a hold needs a whole number of GPUs")
        if ttl_s < 0:
            raise ValueError("ttl_s must not be negative")
        if gpus < 1:
            return
        aside = max(self._now, at - self._cold)
        expire = at + ttl_s
        if expire < aside:
            return
        intent = Intent(self._next_seq(), user, int(gpus), aside, expire, confidence)
        self.book.add_intent(intent)
        self._push(aside, PLACE, intent.id)

    def retain(self, job: Job, gpus: int, ttl_s: float, confidence: float = 1.0) -> int:
        if self._finishing is None or self._finishing[0] is not job:
            raise RuntimeError("retain is only allowed while that job finishes")
        pool = self._finishing[1]
        count = min(int(gpus), len(pool))
        # Holds never block real demand: queued jobs get these GPUs instead.
        if count < 1 or ttl_s <= 0 or self._queued or not self._budget_ok(job.user, count):
            return 0
        kept = pool[:count]
        del pool[:count]
        now = self._now
        self._add_hold(Hold(self._next_seq(), job.user, kept, now, now, now + ttl_s, confidence))
        return count

    def held_gpus(self, user: str) -> int:
        return self.book.asked(user)

    def extend(self, user: str, until: float) -> None:
        for hold in self.book.user_holds(user):
            if hold.expire_at < until:
                hold.expire_at = until
                self._push(until, EXPIRE, hold.id)
        for intent in self.book.user_intents(user):
            intent.expire_at = max(intent.expire_at, until)

    def keep(self, user: str, gpus: int, until: float) -> None:
        placed = [(h.expire_at, len(h.gpus), h) for h in self.book.user_holds(user)]
        asked = [(i.expire_at, i.gpus, i) for i in self.book.user_intents(user)]
        covered = 0
        for expire_at, count, item in sorted(placed + asked, key=lambda e: -e[0]):
            if covered >= gpus:
                break
            covered += count
            if expire_at < until:
                item.expire_at = until
                if isinstance(item, Hold):
                    self._push(until, EXPIRE, item.id)

    def totals(self) -> Totals:
        # Accrued so far, not charged: a job's whole run counts when it starts and a hold's
        # idle when it ends, both too late for a controller. GPUs not free so far are busy
        # or idle; idle so far is what ended holds were charged plus open holds' time.
        rec, now = self.rec, self._now
        idle = rec.warming_gpu_s + rec.ready_idle_gpu_s
        idle += sum(len(h.gpus) * (now - h.aside_at) for h in self.book.holds.values())
        busy = max(0.0, rec.taken_gpu_s - idle)
        return Totals(now, busy, idle, rec.reactive_idle_gpu_s)

    def user_totals(self, user: str) -> Totals:
        now = self._now
        idle = self.rec.user_idle_gpu_s.get(user, 0.0)
        idle += sum(len(h.gpus) * (now - h.aside_at) for h in self.book.user_holds(user))
        users = self.users
        return Totals(now, users.busy(user, now), idle, users.reactive.get(user, 0.0))

    def release(self, user: str) -> None:
        for hold in self.book.user_holds(user):
            self.book.end(hold, self._now, preempted=False)
        for intent in self.book.user_intents(user):
            self.book.pop_intent(intent.id)
        self._dispatch()

    # -- the event loop ----------------------------------------------------------------------

    def run(self) -> dict[str, object]:
        for job in self.jobs:
            self._push(job.submit, ARRIVAL, job)
        self.policy.begin(self.jobs, self)
        tick = self.policy.tick_s
        if tick is not None and tick <= 0:
            raise ValueError("tick_s must be positive")
        if tick and self.jobs:
            self._push(self.jobs[0].submit, TICK, None)
        total = len(self.jobs)
        heap, state, rec, book = self._heap, self.state, self.rec, self.book
        capacity = state.total_count()
        while heap and self._done < total:
            when, kind, _, item = heapq.heappop(heap)
            # Integrate GPUs not free over time: must equal busy + idle (an exactness check).
            rec.taken_gpu_s += (capacity - state.free_count()) * (when - self._now)
            self._now = when
            if kind == FINISH:
                self._finish(item)  # type: ignore[arg-type]
            elif kind == ARRIVAL:
                self._arrive(item)  # type: ignore[arg-type]
            elif kind == PLACE:
                self._place(item)  # type: ignore[arg-type]
            elif kind == EXPIRE:
                hold = book.holds.get(item)  # type: ignore[call-overload]
                if hold is not None and hold.expire_at == when:
                    book.end(hold, when, preempted=False)
                    self._dispatch()
            else:
                self.policy.on_tick(when, self)
                if tick:
                    self._push(when + tick, TICK, None)
        # The replay ends when the last job ends; holds still open are charged up to then.
        for hid in sorted(book.holds):
            book.end(book.holds[hid], self._now, preempted=False)
        result = rec.result(self.policy.name, self.config.capacity, self._cold)
        extra = getattr(self.policy, "report", None)
        if extra is not None:
            result.update(extra())
        return result

    def _push(self, when: float, kind: int, item: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, kind, self._seq, item))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- jobs --------------------------------------------------------------------------------

    def _arrive(self, job: Job) -> None:
        user = job.user
        previous = self._last_arrival.get(user)
        self._last_arrival[user] = job.submit
        set_aside = self.book.set_aside(user)
        info = (None if previous is None else job.submit - previous, set_aside)
        # A job its own holds cover needs no free GPU, so it never waits behind others.
        covered = set_aside >= job.gpus
        if not ((covered or not self._queued) and self._try_start(job, info)):
            self._arrival_info[job.seq] = info
            self._queues.setdefault(user, deque()).append(job)
            self._queued += 1
            self._dispatch()
        self.policy.on_arrival(job, self._now, self)

    def _dispatch(self) -> None:
        """Start queued jobs in fair-share order while the next one fits (no backfill)."""
        while self._queued:
            # Within a user the oldest job ranks first, so only queue heads compete.
            heads = {q[0].seq: q[0] for q in self._queues.values()}
            started = None
            for view in self._fair_order(heads):
                job = heads[int(view.id)]
                if self._try_start(job, self._arrival_info[job.seq]):
                    del self._arrival_info[job.seq]
                    started = job
                    break
                if not self.config.backfill:
                    break
            if started is None:
                return
            queue = self._queues[started.user]
            queue.popleft()
            if not queue:
                del self._queues[started.user]
            self._queued -= 1

    def _fair_order(self, heads: dict[int, Job]) -> list[PendingView]:
        now, half = self._now, self.config.half_life_s
        users = {job.user for job in heads.values()}
        usage = {u: self._usage[u].at_time(now, half) for u in users if u in self._usage}
        factors = fair_share_factors(
            usage,
            dict.fromkeys(users, 1.0),
            total_usage=self._usage_total.at_time(now, half),
            total_weight=float(max(1, len(self._last_arrival))),
        )
        views = [PendingView(str(s), j.user, j.gpus, j.submit) for s, j in heads.items()]
        if self.config.backfill:
            return order_pending(views, factors, now, self.config.aging_s)
        best = pick_next(views, factors, now, self.config.aging_s)
        return [best] if best is not None else []

    def _try_start(self, job: Job, info: ArrivalInfo) -> bool:
        """Start `job` now if its user's holds plus free (or preempted) GPUs cover it."""
        now = self._now
        claims, have = self.book.plan_claim(job.user, job.gpus, now)
        need = job.gpus - have
        fresh: list[str] = []
        if need:
            placed = place(self.state, PlacementRequest(need))
            if placed is None:
                placed = self._preempt_for(need, job.user)
                if placed is None:
                    return False
            fresh = placed
        if have and not self._fits(claims, fresh, job.gpus):
            # Held GPUs scattered over more nodes than the job needs are not handed to it,
            # as a real allocation would not be: it takes fresh GPUs that fit, when some do.
            whole = place(self.state, PlacementRequest(job.gpus))
            if whole is not None and self._fits([], whole, job.gpus):
                self.rec.claims_misfit += 1
                claims, fresh = [], whole
        if fresh:
            self.state.take(fresh)
        start = now + self._cold if fresh else now
        for hold, _ in claims:
            start = max(start, hold.warm_at)
        gpus = self.book.claim(claims, start)
        rec = self.rec
        if fresh:
            gpus.extend(fresh)
            rec.charge_idle(now, now + self._cold, start, len(fresh), job.user)
        ttg = start - job.submit
        rec.queue_wait.append(now - job.submit)
        # A warm hit starts at once on its user's ready holds alone: with no cold start a fresh
        # GPU also gives time-to-GPU 0, but nothing was warm for the job.
        hit = not fresh and ttg <= 0
        miss = None if hit else classify_miss(info[0], info[1], job.gpus)
        rec.job_started(ttg, miss, is_day_start(job.submit, info[0]), job.gpus)
        used = job.gpus * job.duration
        rec.busy_gpu_s += used
        rec.reactive_idle_gpu_s += job.gpus * self._cold
        # Fair share charges a job's whole GPU time when it starts (the trace knows it).
        half = self.config.half_life_s
        self._usage[job.user] = self._usage.get(job.user, DecayedUsage(0.0, now)).charge(
            used, now, half
        )
        self._usage_total = self._usage_total.charge(used, now, half)
        self._running[job.seq] = gpus
        self.users.started(
            job.user, job.seq, start=start, duration=job.duration, gpus=job.gpus, cold_s=self._cold
        )
        self._push(start + job.duration, FINISH, job)
        return True

    def _fits(self, claims: list[tuple[Hold, int]], fresh: list[str], gpus: int) -> bool:
        """Whether held plus fresh GPUs span no more nodes than a job of `gpus` GPUs needs."""
        per_node = self.config.gpus_per_node
        needed = -(-gpus // per_node)
        slots = self.state.slots
        nodes = {slots[uuid].node for uuid in fresh}
        for hold, take in claims:
            nodes.update(slots[uuid].node for uuid in hold.gpus[:take])
            if len(nodes) > needed:
                return False
        return len(nodes) <= needed

    def _finish(self, job: Job) -> None:
        gpus = self._running.pop(job.seq)
        self.users.finished(job.user, job.seq)
        self._finishing = (job, gpus)
        try:
            self.policy.on_finish(job, self._now, self)
        finally:
            self._finishing = None
        if gpus:
            self.state.free(gpus)
        self._done += 1
        self._dispatch()

    # -- holds -------------------------------------------------------------------------------

    def _budget_ok(self, user: str, gpus: int) -> bool:
        if self._budget is None:
            return True
        return check_hold_budget(self._budget, self.book.set_aside(user), gpus).allowed

    def _place(self, iid: int) -> None:
        intent = self.book.pop_intent(iid)
        if intent is None or intent.expire_at < self._now:
            return
        # Holds never take GPUs while real demand waits, and draw on the per-user budget.
        placed = None
        if not self._queued and self._budget_ok(intent.user, intent.gpus):
            placed = place(self.state, PlacementRequest(intent.gpus))
        if placed is None:
            self.rec.holds_failed += 1
            return
        self.state.take(placed)
        now = self._now
        self._add_hold(
            Hold(
                intent.id,
                intent.user,
                placed,
                now,
                now + self._cold,
                intent.expire_at,
                intent.confidence,
            )
        )

    def _add_hold(self, hold: Hold) -> None:
        self.book.add(hold)
        self._push(hold.expire_at, EXPIRE, hold.id)

    def _preempt_for(self, need: int, user: str) -> list[str] | None:
        """Make room for a real job of `user` by preempting other users' holds."""
        others = self.book.held_total - self.book.set_aside(user)
        if self.state.free_count() + others < need:
            return None
        choice = choose_preemptions(self.state, PlacementRequest(need), self.book.views(user))
        if choice is None:
            return None
        for hid in choice.hold_ids:
            self.book.end(self.book.holds[int(hid)], self._now, preempted=True)
        self.rec.preemptions += len(choice.hold_ids)
        return list(choice.gpu_uuids)
