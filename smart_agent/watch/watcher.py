"""Watches configured files and folders (watchdog; polling on remote filesystems or when
native notifications cannot start) and feeds each new line to a callback, one thread."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from smart_agent.watch.paths import WatchSpec, files_of, is_network_fs, watch_root
from smart_agent.watch.tailer import FileTailer, TailStats

log = logging.getLogger(__name__)
Polling = Literal["auto", "always", "never"]
SpecLineCallback = Callable[[WatchSpec, Path, str], None]
SpecNoticeCallback = Callable[[WatchSpec, Path, str], None]


@dataclass(slots=True)
class WatchStats:
    files: int = 0  # files followed now
    files_skipped: int = 0  # matching files not followed at the last scan (over max_files)
    scans: int = 0
    observer: str = "none"  # native, polling, native+polling or none
    fallbacks: int = 0  # times native notifications failed and polling took over


STRUCTURE_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        self.watcher.touched([os.fsdecode(p) for p in paths if p], event.is_directory)


class Watcher:
    """Follows every file the specs match; `on_line(spec, path, text)` gets each new line
    and `on_notice(spec, path, what)` the tailers' notices, both on the watcher's thread.

    Notifications (watchdog) report files and folders created, moved and deleted; new
    lines are found by polling every tailer every `poll_s` (a stat per file), which costs
    far less than a notification per written line (`notify_writes=True` asks for those
    too, for lower latency). Folders are also scanned for new files every `rescan_s`, in
    case a notification is lost. Files found after the start are read from their beginning,
    except a file that is a followed one under a new name (rename rotation: continued where
    it was) or a copy of one (it holds the last bytes read from a followed file at the same
    offset, as copytruncate's copy does: continued from there). Descriptors of files idle
    for `idle_close_s` are closed.
    """

    def __init__(
        self,
        specs: Iterable[WatchSpec],
        on_line: SpecLineCallback,
        *,
        on_notice: SpecNoticeCallback | None = None,
        polling: Polling = "auto",
        poll_s: float = 2.0,
        rescan_s: float = 30.0,
        batch_s: float = 0.05,
        max_files: int = 1000,
        max_line_bytes: int = 64 * 1024,
        idle_close_s: float = 300.0,
        notify_writes: bool = False,
        quiet_s: float = 5.0,
        from_start: Callable[[WatchSpec, Path], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.specs = list(specs)
        self.on_line = on_line
        self.on_notice = on_notice
        self.polling = polling
        self.poll_s = poll_s
        self.rescan_s = rescan_s
        self.batch_s = batch_s
        self.max_files = max_files
        self.max_line_bytes = max_line_bytes
        self.idle_close_s = idle_close_s
        self.notify_writes = notify_writes
        self.quiet_s = quiet_s
        # Files read from their start though not backfilled (job tables: see snapshot.py).
        self.from_start = from_start
        self.clock = clock
        self.stats = WatchStats()
        self.tailers: dict[Path, tuple[WatchSpec, FileTailer]] = {}
        self._active: dict[Path, float] = {}
        self._dirty: set[Path] = set()
        self._rescan = True
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observers: list[BaseObserver] = []
        self._scheduled: set[tuple[Path, bool]] = set()
        self._started = False
        self._last_poll = self._last_scan = float("-inf")

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, *, background: bool = True) -> None:
        """Find the files and position them (at their ends, unless backfill: then their
        content is read here, on the caller's thread); then start notifications and the
        thread, unless `background` is false (the caller then calls `poll_once`)."""
        self.scan()
        now = self.clock()
        for path in list(self.tailers):
            self._poll(path, now)  # positions each file now, so no line written later is lost
        self._last_poll = now
        self._started = True
        if not background:
            return
        self._start_observers()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="jitgpu-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        for observer in self._observers:
            try:
                observer.stop()
                observer.join(timeout)
            except Exception:  # an observer that failed to start cannot stop either
                log.debug("observer stop failed", exc_info=True)
        self._observers = []
        self._scheduled.clear()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for _, tailer in self.tailers.values():
            tailer.close()

    def touched(self, paths: Iterable[str], is_directory: bool = False) -> None:
        """A change notification (from watchdog, or a caller): look at these paths soon."""
        with self._lock:
            for text in paths:
                self._dirty.add(Path(text))
            if is_directory:
                self._rescan = True
        self._wake.set()

    # -- one pass (the thread's loop body; tests call it directly) -------------------------

    def poll_once(self, *, everything: bool = False) -> int:
        """Read what is new; returns the number of lines delivered."""
        now = self.clock()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            rescan, self._rescan = self._rescan, False
        if rescan or everything or now - self._last_scan >= self.rescan_s:
            self.scan()
            if self._thread is not None:
                self._start_observers()
        lines = 0
        if everything or now - self._last_poll >= self.poll_s:
            self._last_poll = now
            targets = list(self.tailers)
        else:
            targets = [p for p in dirty if p in self.tailers]
            for path in dirty:
                if path not in self.tailers and self._spec_for(path) is not None:
                    self._add(path, self._spec_for(path))  # type: ignore[arg-type]
                    targets.append(path)
        for path in targets:
            lines += self._poll(path, now)
        self._close_idle(now)
        return lines

    def _poll(self, path: Path, now: float) -> int:
        entry = self.tailers.get(path)
        if entry is None:
            return 0
        try:
            count = entry[1].poll()
        except Exception:  # one bad file must not stop the others
            log.warning("reading %s failed", path, exc_info=True)
            return 0
        spec, tailer = entry
        if tailer.has_partial and now - tailer.grew_at >= self.quiet_s:
            count += tailer.flush_partial()  # a last line without newline, writer quiet
        if count or (tailer.is_open and path not in self._active):
            self._active[path] = now
        if tailer.more:
            self._wake.set()
        gone = tailer.ident is None and not tailer.is_draining() and path != spec.path
        if gone and not os.path.lexists(path):  # a file of a folder, deleted: forget it
            del self.tailers[path]
            self._active.pop(path, None)
            self.stats.files = len(self.tailers)
        return count

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_s)
            if self._stop.is_set():
                return
            # Let a burst of writes gather: one read per file for many lines.
            self._stop.wait(self.batch_s)
            self._wake.clear()
            try:
                self.poll_once()
            except Exception:
                log.exception("watch pass failed")

    # -- files ---------------------------------------------------------------------------

    def scan(self) -> None:
        """Find matching files not followed yet."""
        self.stats.scans += 1
        self._last_scan = self.clock()
        skipped = 0
        for spec in self.specs:
            if not spec.path.exists() and spec.path not in self.tailers:
                self._add(spec.path, spec)  # a file that may appear later: polled till then
            for path in files_of(spec, 2 * self.max_files):
                if path not in self.tailers and not self._add(path, spec):
                    skipped += 1
        self.stats.files_skipped = skipped

    def _spec_for(self, path: Path) -> WatchSpec | None:
        for spec in self.specs:
            if spec.wants(path) and path.is_file():
                return spec
        return None

    def _add(self, path: Path, spec: WatchSpec) -> bool:
        if len(self.tailers) >= self.max_files:
            return False
        tailer = FileTailer(
            path,
            lambda p, text, s=spec: self.on_line(s, p, text),
            from_end=not (
                spec.backfill or (self.from_start is not None and self.from_start(spec, path))
            ),
            max_line_bytes=self.max_line_bytes,
            on_notice=None
            if self.on_notice is None
            else (
                lambda p, what, s=spec: self.on_notice(s, p, what)  # type: ignore[misc]
            ),
            clock=self.clock,
        )
        if self._started:
            self._place_new(path, tailer)
        self.tailers[path] = (spec, tailer)
        self.stats.files = len(self.tailers)
        return True

    def _place_new(self, path: Path, tailer: FileTailer) -> None:
        """Where to start a file found after the start: see the class docstring."""
        try:
            st = os.stat(path)
        except OSError:
            tailer.from_end = False
            return
        ident = (st.st_dev, st.st_ino)
        for other_path, (_, other) in list(self.tailers.items()):
            if other_path != path and (other.ident == ident or other.is_draining(ident)):
                released = other.release(ident)
                if released is not None:
                    tailer.adopt(*released)
                    return
        offset = self._copied_up_to(path, st.st_size)
        if offset is not None:
            tailer.resume_at(offset)  # a copy: only what was not read in the original
        else:
            tailer.from_end = False

    def _copied_up_to(self, path: Path, size: int) -> int | None:
        """If `path` holds, at some offset, the last bytes read from a followed file (or
        from one before it was truncated), that offset: the file is a copy of it."""
        marks = [m for _, t in list(self.tailers.values()) for m in t.marks()]
        marks = [(offset, last) for offset, last in marks if 0 < offset <= size and last]
        if not marks:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            for offset, last in marks:
                if os.pread(fd, len(last), offset - len(last)) == last:
                    return offset
        finally:
            os.close(fd)
        return None

    def _close_idle(self, now: float) -> None:
        for path, since in list(self._active.items()):
            if now - since >= self.idle_close_s:
                del self._active[path]
                entry = self.tailers.get(path)
                if entry is not None:
                    entry[1].close()

    def tail_stats(self) -> TailStats:
        total = TailStats()
        for _, tailer in list(self.tailers.values()):  # a copy: the thread may add files
            for key, value in tailer.stats.as_dict().items():
                setattr(total, key, getattr(total, key) + value)
        return total

    # -- notifications -------------------------------------------------------------------

    def _start_observers(self) -> None:
        if not self._started or self._stop.is_set():
            return
        for spec in self.specs:
            root = watch_root(spec)
            if root is None or root in self._scheduled:
                continue
            use_polling = self.polling == "always" or (
                self.polling == "auto"
                and (spec.polling if spec.polling is not None else is_network_fs(root[0]))
            )
            if not use_polling and self._schedule(root, polling=False):
                continue
            if use_polling or self.polling == "auto":
                if not use_polling:
                    self.stats.fallbacks += 1
                    log.warning("no change notifications for %s; polling it", root[0])
                self._schedule(root, polling=True)

    def _schedule(self, root: tuple[Path, bool], *, polling: bool) -> bool:
        observer = next(
            (o for o in self._observers if isinstance(o, PollingObserver) == polling), None
        )
        fresh = observer is None
        if observer is None:
            observer = PollingObserver(timeout=self.poll_s) if polling else Observer()
        # Writes are found by polling every poll_s unless notify_writes: a notification per
        # written line costs far more (in watchdog's Python) than a stat per file per poll.
        event_filter = None if self.notify_writes or polling else STRUCTURE_EVENTS
        try:
            observer.schedule(
                _Handler(self), str(root[0]), recursive=root[1], event_filter=event_filter
            )
            if fresh:
                observer.start()
        except OSError as exc:  # inotify limits, an unsupported filesystem
            log.info("cannot watch %s natively: %s", root[0], exc)
            if fresh:
                try:
                    observer.stop()
                except Exception:
                    log.debug("stopping a failed observer", exc_info=True)
            return False
        if fresh:
            self._observers.append(observer)
        self._scheduled.add(root)
        names = {"PollingObserver": "polling"}
        kinds = sorted({names.get(type(o).__name__, "native") for o in self._observers})
        self.stats.observer = "+".join(kinds) or "none"
        return True
