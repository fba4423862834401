"""Replay bookkeeping of holds: GPUs set aside per user, claims, expiry, and their idle time."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.replay.metrics import Recorder
from control_plane.scheduling.cluster import ClusterState
from control_plane.scheduling.preemption import HoldView


@dataclass(slots=True)
class Hold:
    """GPUs set aside for a user: warming until `warm_at`, claimable until `expire_at`."""

    id: int
    user: str
    gpus: list[str]  # unclaimed GPUs, still taken in the cluster state
    aside_at: float
    warm_at: float
    expire_at: float
    confidence: float


@dataclass(slots=True)
class Intent:
    """A hold asked for and not yet placed; it is placed at `aside_at`."""

    id: int
    user: str
    gpus: int
    aside_at: float
    expire_at: float
    confidence: float


Claim = tuple[Hold, int]


def _claim_order(hold: Hold, now: float) -> tuple[bool, float, int]:
    # Warm holds first, soonest to expire first; then warming ones, soonest warm first.
    warming = hold.warm_at > now
    return (warming, hold.warm_at if warming else hold.expire_at, hold.id)


class HoldBook:
    """Active holds and not-yet-placed intents, per user; charges idle time as holds end."""

    def __init__(self, state: ClusterState, rec: Recorder) -> None:
        self.state = state
        self.rec = rec
        self.holds: dict[int, Hold] = {}
        self.intents: dict[int, Intent] = {}
        self.held_total = 0
        self._by_user: dict[str, set[int]] = {}
        self._intents_by_user: dict[str, set[int]] = {}

    def set_aside(self, user: str) -> int:
        """GPUs warming or warm for `user` now."""
        return sum(len(self.holds[h].gpus) for h in self._by_user.get(user, ()))

    def asked(self, user: str) -> int:
        """GPUs set aside for `user` plus those of intents not yet placed."""
        pending = sum(self.intents[i].gpus for i in self._intents_by_user.get(user, ()))
        return self.set_aside(user) + pending

    def user_holds(self, user: str) -> list[Hold]:
        return [self.holds[h] for h in sorted(self._by_user.get(user, ()))]

    def user_intents(self, user: str) -> list[Intent]:
        return [self.intents[i] for i in sorted(self._intents_by_user.get(user, ()))]

    def add_intent(self, intent: Intent) -> None:
        self.intents[intent.id] = intent
        self._intents_by_user.setdefault(intent.user, set()).add(intent.id)

    def pop_intent(self, iid: int) -> Intent | None:
        intent = self.intents.pop(iid, None)
        if intent is not None:
            ids = self._intents_by_user[intent.user]
            ids.discard(iid)
            if not ids:
                del self._intents_by_user[intent.user]
        return intent

    def add(self, hold: Hold) -> None:
        """Record a hold whose GPUs the caller has already taken."""
        self.holds[hold.id] = hold
        self._by_user.setdefault(hold.user, set()).add(hold.id)
        self.held_total += len(hold.gpus)
        self.rec.holds_placed += 1
        self.rec.hold_gpus_placed += len(hold.gpus)

    def plan_claim(self, user: str, gpus: int, now: float) -> tuple[list[Claim], int]:
        """Which of `user`'s held GPUs a job of `gpus` GPUs would take, and how many."""
        claims: list[Claim] = []
        have = 0
        ids = self._by_user.get(user)
        if not ids:
            return claims, have
        for hold in sorted((self.holds[h] for h in ids), key=lambda h: _claim_order(h, now)):
            take = min(len(hold.gpus), gpus - have)
            claims.append((hold, take))
            have += take
            if have == gpus:
                break
        return claims, have

    def claim(self, claims: list[Claim], start: float) -> list[str]:
        """Hand claimed GPUs to a job starting at `start`; they were idle until then."""
        gpus: list[str] = []
        rec = self.rec
        for hold, take in claims:
            gpus.extend(hold.gpus[:take])
            del hold.gpus[:take]
            self.held_total -= take
            rec.hold_gpus_claimed += take
            rec.charge_idle(hold.aside_at, hold.warm_at, start, take, hold.user)
            if not hold.gpus:
                self._forget(hold)
        return gpus

    def end(self, hold: Hold, now: float, *, preempted: bool) -> None:
        """Expire or preempt a hold: its unclaimed GPUs were idle from set-aside until now."""
        count = len(hold.gpus)
        self.rec.charge_idle(hold.aside_at, hold.warm_at, now, count, hold.user)
        if preempted:
            self.rec.hold_gpus_preempted += count
        else:
            self.rec.hold_gpus_expired += count
        if count:
            self.state.free(hold.gpus)
        self.held_total -= count
        hold.gpus = []
        self._forget(hold)

    def views(self, exclude_user: str) -> list[HoldView]:
        """Other users' holds, as the core's preemption sees them."""
        return [
            HoldView(str(h.id), h.user, tuple(h.gpus), h.confidence, h.aside_at)
            for h in self.holds.values()
            if h.user != exclude_user and h.gpus
        ]

    def _forget(self, hold: Hold) -> None:
        del self.holds[hold.id]
        ids = self._by_user[hold.user]
        ids.discard(hold.id)
        if not ids:
            del self._by_user[hold.user]
