"""Debounce: strong events ask for a cycle at once, bursts once more at the window's end."""

from __future__ import annotations

import threading

from predictors.types import Cue, Event, EventKind
from smart_agent.debounce import Debouncer
from smart_agent.procwatch import SOURCE


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cue(name: str) -> Event:
    return Event(EventKind.CUE, 0.0, "alice", cue=name)


SUBMIT = Event(EventKind.JOB_SUBMITTED, 0.0, "alice")
FINISH = Event(EventKind.JOB_FINISHED, 0.0, "alice")
PROC_START = Event(EventKind.JOB_STARTED, 0.0, "alice", source=SOURCE)
SACCT_START = Event(EventKind.JOB_STARTED, 0.0, "alice", source="~/sacct.txt")


def test_what_is_strong() -> None:
    d = Debouncer(strong_cues={Cue.TRAINING_DONE, "eval_done"})
    assert d.is_strong(SUBMIT) and d.is_strong(FINISH) and d.is_strong(PROC_START)
    assert d.is_strong(cue("eval_done")) and d.is_strong(cue(Cue.TRAINING_DONE))
    assert not d.is_strong(cue(Cue.EPOCH_END)) and not d.is_strong(SACCT_START)


def test_weak_events_never_trigger() -> None:
    d = Debouncer(clock=Clock())
    assert not any(d.offer(cue(Cue.EPOCH_END)) for _ in range(100))
    assert not d.poll() and d.next_due() is None and d.stats.offered == 100


def test_a_burst_gives_one_cycle_now_and_one_when_it_ends() -> None:
    clock = Clock()
    d = Debouncer(window_s=10.0, clock=clock)
    assert d.offer(cue(Cue.PREPROCESSING_DONE))  # at once
    clock.now += 1
    assert not d.offer(SUBMIT) and not d.offer(SUBMIT)  # folded
    assert d.next_due() == 110.0
    clock.now = 109.9
    assert not d.poll()
    clock.now = 110.0
    assert d.poll() and not d.poll()
    clock.now = 115.0
    assert not d.offer(SUBMIT)  # within the window of the trailing cycle
    clock.now = 120.0
    assert d.poll()
    clock.now = 131.0
    assert d.offer(SUBMIT)  # quiet for a window: at once again
    assert d.stats.fired == 4 and d.stats.coalesced == 3 and d.stats.strong == 5


def test_a_process_start_is_never_held_back() -> None:
    clock = Clock()
    d = Debouncer(window_s=10.0, clock=clock)
    assert d.offer(SUBMIT)
    clock.now += 1
    assert d.offer(PROC_START)  # the moment to claim


def test_a_cycle_that_ran_drops_the_pending_one() -> None:
    clock = Clock()
    d = Debouncer(window_s=10.0, clock=clock)
    d.offer(SUBMIT)
    d.offer(SUBMIT)
    d.cycle_ran()
    clock.now += 20
    assert not d.poll() and d.next_due() is None


def test_on_trigger_and_threads() -> None:
    calls = []
    clock = Clock()
    d = Debouncer(window_s=10.0, clock=clock, on_trigger=lambda: calls.append(1))
    fired = []

    def offer_many() -> None:
        fired.extend(d.offer(SUBMIT) for _ in range(500))

    threads = [threading.Thread(target=offer_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fired.count(True) == 1 and len(calls) == 1
    clock.now += 10
    assert d.poll() and len(calls) == 2
    assert d.stats.offered == 2000 and d.stats.coalesced == 1999
