"""Process watch: a job launched on this machine (a command line matching a configured
pattern) is a job-start signal, the moment to claim a warm hold; its exit finishes it."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

from predictors.types import Event, EventKind
from smart_agent.parsers.cues import PROCESS_STARTED
from smart_agent.parsers.shell import launch_gpus
from smart_agent.redact import Redactor

log = logging.getLogger(__name__)
SOURCE = "process"
FRESH_S = 10.0  # a process this young may still exec() into its real command line


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    create_time: float
    cmdline: tuple[str, ...]
    uid: int | None = None


ProcessSource = Callable[[], Iterable[ProcInfo]]


class PsutilSource:
    """The machine's processes via psutil. Only the owner's (`uid`) unless `uid` is None.

    Cheap at a scan every second or two: a process's details are read once (and again
    while it is younger than FRESH_S), then only its pid is listed.
    """

    def __init__(self, uid: int | None = None, clock: Callable[[], float] = time.time) -> None:
        self.uid = uid
        self.clock = clock
        self._cache: dict[int, ProcInfo | None] = {}

    def __call__(self) -> list[ProcInfo]:
        now = self.clock()
        pids = psutil.pids()
        alive = set(pids)
        for pid in [p for p in self._cache if p not in alive]:
            del self._cache[pid]
        out = []
        for pid in pids:
            info = self._cache.get(pid, False)
            if info is False or (info is not None and now - info.create_time < FRESH_S):
                info = self._cache[pid] = self._read(pid)
            if info is not None:
                out.append(info)
        return out

    def _read(self, pid: int) -> ProcInfo | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                uid = proc.uids().real
                if self.uid is not None and uid != self.uid:
                    return None
                return ProcInfo(pid, proc.ppid(), proc.create_time(), tuple(proc.cmdline()), uid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            return None


def own_uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return None if getuid is None else getuid()


@dataclass(slots=True)
class _Tracked:
    info: ProcInfo
    job_id: str
    gpus: int | None
    gpu_model: str | None


class ProcessWatcher:
    """Scans processes every `interval_s`; the first time a process whose command line
    matches a pattern (regex search) is seen gives `job_started` (at its start time,
    source "process", cue "process_started"), its exit `job_finished` with its run time.
    A matching process below another matching one (torchrun's workers) is not a job of
    its own. Processes running when watching begins are reported too (at their start
    times) unless `report_existing` is false.
    """

    def __init__(
        self,
        patterns: Sequence[str],
        on_event: Callable[[Event], None] | None = None,
        *,
        user: str,
        interval_s: float = 2.0,
        source: ProcessSource | None = None,
        only_own: bool = True,
        report_existing: bool = True,
        redactor: Redactor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.patterns = [re.compile(p) for p in patterns]
        self.on_event = on_event
        self.user = user
        self.interval_s = interval_s
        self.source = source or PsutilSource(own_uid() if only_own else None, clock)
        self.report_existing = report_existing
        self.redactor = redactor if redactor is not None else Redactor()
        self.clock = clock
        self.tracked: dict[tuple[int, float], _Tracked] = {}
        self.scans = 0
        self.events = 0
        self.errors = 0
        self._self_pid = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scan(self, now: float | None = None) -> list[Event]:
        """One look at the processes: events for jobs started and finished since the last."""
        now = self.clock() if now is None else now
        try:
            procs = {p.pid: p for p in self.source()}
        except Exception:
            self.errors += 1
            log.warning("listing processes failed", exc_info=True)
            return []
        first = self.scans == 0
        self.scans += 1
        matched = {pid for pid, p in procs.items() if pid != self._self_pid and self._match(p)}
        events: list[Event] = []
        current: set[tuple[int, float]] = set()
        for pid in matched:
            info = procs[pid]
            if self._has_matched_ancestor(info, procs, matched):
                continue
            key = (pid, info.create_time)
            current.add(key)
            if key in self.tracked:
                continue
            gpus, model = launch_gpus(" ".join(info.cmdline))
            # The user's pattern names this process as a GPU job: one GPU unless its
            # command line says how many (a file's bare job line is no such evidence).
            gpus = 1 if gpus is None else gpus
            tracked = _Tracked(info, f"pid{pid}@{int(info.create_time)}", gpus, model)
            self.tracked[key] = tracked
            if first and not self.report_existing:
                continue
            events.append(
                self._event(EventKind.JOB_STARTED, info.create_time, tracked, cue=PROCESS_STARTED)
            )
        for key in [k for k in self.tracked if k not in current]:
            tracked = self.tracked.pop(key)
            if key[0] in procs and procs[key[0]].create_time == key[1]:
                continue  # still running, its command line no longer matches: let it be
            duration = max(0.0, now - tracked.info.create_time)
            events.append(self._event(EventKind.JOB_FINISHED, now, tracked, duration=duration))
        self.events += len(events)
        if self.on_event is not None:
            for event in events:
                self.on_event(event)
        return events

    def _match(self, info: ProcInfo) -> bool:
        if not info.cmdline:
            return False
        text = " ".join(info.cmdline)
        return any(p.search(text) for p in self.patterns)

    @staticmethod
    def _has_matched_ancestor(
        info: ProcInfo, procs: dict[int, ProcInfo], matched: set[int]
    ) -> bool:
        pid, hops = info.ppid, 0
        while pid in procs and hops < 32 and pid != info.pid:
            if pid in matched:
                return True
            pid, hops = procs[pid].ppid, hops + 1
        return False

    def _event(
        self,
        kind: EventKind,
        at: float,
        tracked: _Tracked,
        *,
        cue: str | None = None,
        duration: float | None = None,
    ) -> Event:
        return Event(
            kind=kind,
            at=at,
            user=self.user,
            gpus=tracked.gpus,
            gpu_model=self.redactor.field(tracked.gpu_model, 64),
            duration_s=duration,
            job_id=tracked.job_id,
            cue=cue,
            excerpt=self.redactor.excerpt(" ".join(tracked.info.cmdline)) or None,
            source=SOURCE,
        )

    # -- thread --------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="jitgpu-procwatch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:
                self.errors += 1
                log.exception("process scan failed")
            self._stop.wait(self.interval_s)
