"""Debounce: a strong event asks for a prediction cycle at once; a burst of them asks once,
plus once more when the burst's window closes, so the cycle sees the whole burst."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from predictors.types import Event, EventKind
from smart_agent.parsers.cues import STRONG_CUES
from smart_agent.procwatch import SOURCE as PROCESS_SOURCE

STRONG_KINDS = frozenset({EventKind.JOB_SUBMITTED, EventKind.JOB_FINISHED})


@dataclass(slots=True)
class DebounceStats:
    offered: int = 0
    strong: int = 0
    fired: int = 0  # cycles asked for (at once, or when a burst's window closed)
    coalesced: int = 0  # strong events folded into a cycle already asked for

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Debouncer:
    """Says when to run a cycle now. Thread-safe; time comes from `clock`.

    Strong: job_submitted and job_finished events, and cues named in `strong_cues`
    (default: preprocessing_done, training_done, job_submitted; pass the user's strong cues
    too). Urgent: job_started from a source in `urgent_sources` (the process watch: a job
    starting here is the moment to claim), which is never folded.

    `offer(event)` is True when a cycle should run now: an urgent event, or the first
    strong event after a quiet `window_s`. Strong events within `window_s` of the last
    cycle asked for are folded: `poll()` turns True once, when that window closes
    (`next_due()` says when). `cycle_ran()` tells it a cycle (e.g. the periodic one) has
    seen every event so far, which drops a pending one. `on_trigger`, if given, is called
    (outside the lock) whenever `offer` or `poll` returns True.
    """

    def __init__(
        self,
        *,
        window_s: float = 10.0,
        strong_cues: Iterable[str] = STRONG_CUES,
        urgent_sources: Iterable[str] = (PROCESS_SOURCE,),
        clock: Callable[[], float] = time.monotonic,
        on_trigger: Callable[[], None] | None = None,
    ) -> None:
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        self.window_s = window_s
        self.strong_cues = frozenset(strong_cues)
        self.urgent_sources = frozenset(urgent_sources)
        self.clock = clock
        self.on_trigger = on_trigger
        self.stats = DebounceStats()
        self._lock = threading.Lock()
        self._last_fire: float | None = None
        self._due: float | None = None

    def is_urgent(self, event: Event) -> bool:
        return event.kind is EventKind.JOB_STARTED and event.source in self.urgent_sources

    def is_strong(self, event: Event) -> bool:
        kind = event.kind
        if kind in STRONG_KINDS or self.is_urgent(event):
            return True
        return kind is EventKind.CUE and event.cue in self.strong_cues

    def offer(self, event: Event) -> bool:
        strong = self.is_strong(event)
        urgent = strong and self.is_urgent(event)
        with self._lock:
            self.stats.offered += 1
            if not strong:
                return False
            self.stats.strong += 1
            now = self.clock()
            quiet = self._last_fire is None or now - self._last_fire >= self.window_s
            if urgent or quiet:
                self._fire(now)
                fire = True
            else:
                if self._due is None:
                    self._due = self._last_fire + self.window_s
                self.stats.coalesced += 1
                fire = False
        if fire and self.on_trigger is not None:
            self.on_trigger()
        return fire

    def poll(self) -> bool:
        """True once when a folded burst's window has closed: run a cycle now."""
        with self._lock:
            now = self.clock()
            fire = self._due is not None and now >= self._due
            if fire:
                self._fire(now)
        if fire and self.on_trigger is not None:
            self.on_trigger()
        return fire

    def next_due(self) -> float | None:
        """When `poll()` will next be True (clock time), or None if nothing is pending."""
        with self._lock:
            return self._due

    def cycle_ran(self) -> None:
        """A cycle ran now and saw every event offered so far."""
        with self._lock:
            self._due = None

    def _fire(self, now: float) -> None:
        self._last_fire = now
        self._due = None
        self.stats.fired += 1
