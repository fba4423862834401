"""Stall watch: was the server itself unable to take heartbeats? Then silence proves nothing.

Three parts must run for a heartbeat to count: the event loop that answers it, the heartbeat
flush that writes it, and the job thread that judges silence. Each beats here at its own
period; a beat that comes later than its period plus a threshold marks a stall, and a part
whose last beat is that late is stalled now. Liveness waits a full heartbeat timeout after
any stall ends, so every node gets the time it would have had.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("jitgpu.jobs")


class StallWatch:
    def __init__(
        self, *, threshold_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold_s = threshold_s
        self.clock = clock
        self._period: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._stall_ended_at: float | None = None
        self._lock = threading.Lock()
        self.stalls: list[tuple[str, float]] = []  # (part, seconds) of every stall measured

    def expect(self, part: str, period_s: float) -> None:
        """`part` will beat every `period_s` from now on."""
        with self._lock:
            self._period[part] = period_s
            self._last[part] = self.clock()

    def forget(self, part: str) -> None:
        with self._lock:
            self._period.pop(part, None)
            self._last.pop(part, None)

    def beat(self, part: str) -> None:
        now = self.clock()
        with self._lock:
            previous, period = self._last.get(part), self._period.get(part)
            if previous is None or period is None:
                return  # not expected (yet): nothing to measure against
            self._last[part] = now
            gap = now - previous
            if gap <= period + self.threshold_s:
                return
            self._stall_ended_at = now
            self.stalls.append((part, gap))
        log.warning(
            "the %s stalled for %.1fs; nodes get a full heartbeat timeout from now before "
            "any is taken offline",
            part,
            gap,
        )

    def stalled_now(self) -> str | None:
        """The part whose beat is overdue now, if any."""
        now = self.clock()
        with self._lock:
            for part, last in self._last.items():
                if now - last > self._period[part] + self.threshold_s:
                    return part
        return None

    def grace_left(self, grace_s: float) -> float:
        """Seconds liveness must still wait: all of `grace_s` while a part is stalled, then
        what is left of it since the last stall ended."""
        if self.stalled_now() is not None:
            return grace_s
        with self._lock:
            ended = self._stall_ended_at
        if ended is None:
            return 0.0
        return max(0.0, grace_s - (self.clock() - ended))


async def beat_loop(watch: StallWatch, period_s: float = 0.25) -> None:
    """Beat for the event loop; cancelled at shutdown."""
    watch.expect("event loop", period_s)
    try:
        while True:
            watch.beat("event loop")
            await asyncio.sleep(period_s)
    finally:
        watch.forget("event loop")
