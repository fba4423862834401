"""Session model: a user's clumps of jobs (sweeps), their size and cadence, and the next clump."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median
from typing import Any

CLUMP_GAP_S = 120.0  # a submit within this of the user's previous one continues the clump
MAX_CLUMPS = 32  # past clumps kept per user
PERIODIC_TOLERANCE = 0.05  # start-to-start gaps within 5% of their median count as periodic


@dataclass(frozen=True, slots=True)
class Cadence:
    """A user's clumps start every `period_s` seconds; `share` of the recent gaps agreed."""

    period_s: float
    share: float


def detect_cadence(
    gaps: list[float], *, min_samples: int = 3, tolerance: float = PERIODIC_TOLERANCE
) -> Cadence | None:
    """A period when most start-to-start gaps lie within `tolerance` of their median (some
    users submit every 600 s exactly); None when the gaps are too few or too spread."""
    if len(gaps) < min_samples:
        return None
    mid = median(gaps)
    if mid <= 0:
        return None
    near = sum(1 for g in gaps if abs(g - mid) <= tolerance * mid)
    share = near / len(gaps)
    return Cadence(mid, share) if share >= 0.6 else None


@dataclass(slots=True)
class UserSessions:
    """One user's clumps so far and the one under way."""

    last_submit: float | None = None
    start: float = 0.0  # the current clump's first submit
    jobs: int = 0  # jobs in the current clump so far
    gpus: int = 1  # GPUs of the current clump's latest job
    cue_size: int | None = None  # the clump's whole size, where an agent cue told it
    sizes: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_CLUMPS))
    spans: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_CLUMPS))
    starts: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_CLUMPS + 1))

    def expected_size(self) -> int:
        """Jobs the current clump will have: the cue, else the median of past clumps."""
        if self.cue_size is not None:
            return self.cue_size
        return int(median(self.sizes)) if self.sizes else 1

    def rate(self) -> float:
        """Jobs per second inside a clump of this user (median over past multi-job clumps)."""
        rates = [(n - 1) / s for n, s in zip(self.sizes, self.spans, strict=True) if n > 1 and s]
        return median(rates) if rates else 0.0

    def cadence(self) -> Cadence | None:
        starts = list(self.starts)
        return detect_cadence([b - a for a, b in pairwise(starts)])


@dataclass(frozen=True, slots=True)
class SessionDemand:
    """`gpus` GPUs for `user` at `at`, claimable for `ttl_s`; what the replay adapter reads."""

    user: str
    gpus: int
    at: float
    confidence: float
    ttl_s: float
    reason: str


class SessionModel:
    """Clumps of one user's submits (gaps up to `clump_gap_s`), and two forecasts from them.

    - Inside a clump: the pipeline. While fewer jobs have come than the clump is expected to
      have (a cue's array size, else the median of the user's past clumps), keep warming as
      many jobs' GPUs as will arrive within one warm-up (`lead_s`) at the user's in-clump
      rate, at least one: a sweep of hundreds of jobs in seconds is served as it comes.
    - Between clumps: the next clump, where the user's clump starts are periodic (a cadence):
      its first jobs (as many as arrive within a warm-up) warm for the next start.

    Feed it `observe_arrival(job, now)` (job: user, gpus, optional `array_size` cue) and ask
    `forecast(now)` for the users whose state changed since the last call.
    """

    def __init__(
        self,
        *,
        clump_gap_s: float = CLUMP_GAP_S,
        lead_s: float = 120.0,
        max_jobs: int = 64,
        name: str = "session",
    ) -> None:
        if not clump_gap_s > 0 or not lead_s > 0 or max_jobs < 1:
            raise ValueError("clump_gap_s and lead_s must be positive, max_jobs at least 1")
        self.clump_gap_s = clump_gap_s
        self.lead_s = lead_s
        self.max_jobs = max_jobs
        self.name = name
        self.users: dict[str, UserSessions] = {}
        self._dirty: set[str] = set()

    def observe_arrival(self, job: Any, now: float) -> None:
        user = str(job.user)
        s = self.users.get(user)
        if s is None:
            s = self.users[user] = UserSessions()
        cue = getattr(job, "array_size", None)
        if s.last_submit is None or now - s.last_submit > self.clump_gap_s:
            if s.last_submit is not None:
                s.sizes.append(s.jobs)
                s.spans.append(s.last_submit - s.start)
            s.start, s.jobs = now, 0
            s.cue_size = int(cue) if cue else None
            s.starts.append(now)
        s.jobs += 1
        s.gpus = max(1, int(job.gpus))
        s.last_submit = now
        self._dirty.add(user)

    def observe_finish(self, job: Any, now: float) -> None:
        # A finish moves no session, but the forecast after it may change: a clump that
        # stopped short of its expected size gives way to the next clump's.
        if str(job.user) in self.users:
            self._dirty.add(str(job.user))

    def forecast(self, now: float) -> list[SessionDemand]:
        out: list[SessionDemand] = []
        for user in sorted(self._dirty):
            out.extend(self.user_forecast(user, now))
        self._dirty.clear()
        return out

    def user_forecast(self, user: str, now: float) -> list[SessionDemand]:
        s = self.users.get(user)
        if s is None or s.last_submit is None:
            return []
        per_lead = s.rate() * self.lead_s
        remaining = s.expected_size() - s.jobs
        if remaining > 0 and now - s.last_submit <= self.clump_gap_s:
            jobs = min(remaining, self.max_jobs, max(1, int(per_lead + 0.999)))
            sure = 0.9 if s.cue_size is not None else min(0.9, len(s.sizes) / (len(s.sizes) + 4))
            # Set aside now, warm after a warm-up, kept a clump gap beyond it.
            ttl = self.lead_s + self.clump_gap_s
            return [
                SessionDemand(user, s.gpus, now, sure, ttl, f"clump: job {s.jobs + i + 1}")
                for i in range(jobs)
            ]
        cadence = s.cadence()
        if cadence is None:
            return []
        at = s.start + cadence.period_s
        while at < now:
            at += cadence.period_s
        jobs = min(self.max_jobs, max(1, int(per_lead + 0.999)), s.expected_size())
        ttl = max(self.clump_gap_s, PERIODIC_TOLERANCE * cadence.period_s)
        reason = f"cadence: a clump every {cadence.period_s:.0f}s"
        return [SessionDemand(user, s.gpus, at, cadence.share, ttl, reason) for _ in range(jobs)]
