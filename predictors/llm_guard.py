"""Rate limit, daily cost cap and back-off for LLM calls, all in caller-supplied time."""

from __future__ import annotations

import math
from collections import deque

HOUR_S = 3600.0
DAY_S = 86400.0


class CallGuard:
    """Decides whether another request may go out at `now`, and remembers what went out.

    - Rate: at most `calls_per_hour` requests in any rolling hour (None: unlimited).
    - Cost: at most `usd_per_day` per UTC day (None: unlimited). A request is refused once
      the day's spend plus the dearest recent call would pass the cap, so one call cannot
      overshoot it by much.
    - Back-off: after an auth failure or a provider rate limit, nothing until a given time.

    The agent can restore the day's spend after a restart with `record_spend`.
    """

    def __init__(self, calls_per_hour: int | None, usd_per_day: float | None) -> None:
        self.calls_per_hour = calls_per_hour
        self.usd_per_day = usd_per_day
        self._requests: deque[float] = deque()
        self._day: int | None = None
        self._spent = 0.0
        self._recent_costs: deque[float] = deque(maxlen=8)
        self.blocked_until: float | None = None

    def _roll(self, now: float) -> None:
        day = math.floor(now / DAY_S)
        if day != self._day:
            self._day = day
            self._spent = 0.0
        horizon = now - HOUR_S
        while self._requests and self._requests[0] <= horizon:
            self._requests.popleft()

    def spent_today(self, now: float) -> float:
        self._roll(now)
        return self._spent

    def requests_last_hour(self, now: float) -> int:
        self._roll(now)
        return len(self._requests)

    def refusal(self, now: float) -> str | None:
        """None when a request may go out now; else why not ('backing_off', 'rate_capped',
        'budget_exhausted')."""
        self._roll(now)
        if self.blocked_until is not None and now < self.blocked_until:
            return "backing_off"
        if self.calls_per_hour is not None and len(self._requests) >= self.calls_per_hour:
            return "rate_capped"
        if self.usd_per_day is not None:
            expected = max(self._recent_costs, default=0.0)
            if self._spent >= self.usd_per_day or self._spent + expected > self.usd_per_day:
                return "budget_exhausted"
        return None

    def record_request(self, now: float) -> None:
        self._roll(now)
        self._requests.append(now)

    def record_spend(self, now: float, usd: float) -> None:
        self._roll(now)
        self._spent += usd
        self._recent_costs.append(usd)

    def back_off(self, until: float) -> None:
        self.blocked_until = until if self.blocked_until is None else max(self.blocked_until, until)
