"""The Context a predictor reads, and the incremental builder that keeps it current."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from predictors.history import GapPool, HistoryConfig, UserHistory
from predictors.types import ALL_USERS, Event


@dataclass(frozen=True, slots=True)
class Context:
    """What a predictor sees about one user at one moment.

    `history` is the builder's live object (not a copy, so that building a context costs
    nothing): read it during `predict`, do not keep it. `events` is a snapshot of the user's
    most recent events, oldest first; `seq` counts every event observed for the user, so a
    consumer can tell which of `events` it has not seen yet. `pool` holds every user's idle
    gaps together (live, like `history`), or None when the builder keeps no pool.
    """

    user: str
    at: float
    history: UserHistory
    events: tuple[Event, ...]
    seq: int
    pool: GapPool | None = None

    def new_events(self, last_seq: int) -> tuple[Event, ...]:
        """The events after `last_seq` (those that are still in the snapshot)."""
        fresh = self.seq - last_seq
        if fresh <= 0:
            return ()
        return self.events[-fresh:] if fresh < len(self.events) else self.events


class HistoryBuilder:
    """Folds events into per-user histories; `context()` is O(max_events).

    One builder serves a whole replay: each `observe` touches only the event's user (and the
    aggregate history when enabled).
    """

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        self._histories: dict[str, UserHistory] = {}
        self._events: dict[str, deque[Event]] = {}
        # The aggregate history is no user: its gaps stay out of the pool.
        self.pool = GapPool(self.config.pool_gaps) if self.config.pool_gaps else None

    def observe(self, event: Event) -> UserHistory:
        history = self._record(event.user, event)
        if self.config.aggregate and event.user != ALL_USERS:
            self._record(ALL_USERS, event, key_prefix=event.user)
        return history

    def observe_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.observe(event)

    def _record(self, user: str, event: Event, key_prefix: str | None = None) -> UserHistory:
        history = self._histories.get(user)
        if history is None:
            history = self._new_history(user)
        if key_prefix is not None and event.job_id is not None:
            # Job ids are unique per user only; the aggregate needs them unique overall.
            event = _with_job_id(event, f"{key_prefix}/{event.job_id}")
        history.observe(event)
        self._events[user].append(event)
        return history

    def history(self, user: str) -> UserHistory:
        history = self._histories.get(user)
        if history is None:
            history = self._new_history(user)
        return history

    def _new_history(self, user: str) -> UserHistory:
        pool = None if user == ALL_USERS else self.pool
        history = self._histories[user] = UserHistory(user, self.config, pool)
        self._events[user] = deque(maxlen=self.config.max_events)
        return history

    def context(self, user: str, now: float) -> Context:
        history = self.history(user)
        events = tuple(self._events[user])
        return Context(user, now, history, events, history.n_events, self.pool)

    def users(self) -> list[str]:
        return sorted(self._histories)


ContextBuilder = HistoryBuilder


def build_context(
    events: Iterable[Event], user: str, now: float, config: HistoryConfig | None = None
) -> Context:
    """One-shot context from a list of events (tests, or an agent rebuilding after restart)."""
    builder = HistoryBuilder(config)
    builder.observe_all(sorted(events, key=lambda event: event.at))
    return builder.context(user, now)


def _with_job_id(event: Event, job_id: str) -> Event:
    return Event(
        kind=event.kind,
        at=event.at,
        user=event.user,
        gpus=event.gpus,
        gpu_model=event.gpu_model,
        duration_s=event.duration_s,
        job_id=job_id,
        cue=event.cue,
        excerpt=event.excerpt,
        source=event.source,
    )
