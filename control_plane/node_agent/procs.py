"""Child processes in their own process group: output tail, timeout, stop, orphan clean-up."""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

import psutil

from control_plane.node_agent.run_as import RunAs

log = logging.getLogger("jitgpu.node.procs")

TAIL_CHARS = 4096  # what the wire accepts for output_tail


class OutputTail:
    """The last `limit` characters written to it; safe to read while a thread writes."""

    def __init__(self, limit: int = TAIL_CHARS) -> None:
        self.limit = limit
        self._text = ""
        self._lock = threading.Lock()
        self.version = 0  # bumps on every write, so a reader can tell that something changed

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._text = (self._text + text)[-self.limit :]
            self.version += 1

    def text(self) -> str:
        with self._lock:
            return self._text


class Child:
    """One command, started in a new session so that a stop reaches every process it started."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path | None = None,
        tail: OutputTail | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        self.argv = argv
        self.run_as = run_as
        self.env = env
        self.cwd = cwd
        self.tail = tail or OutputTail()
        self.popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def start(self) -> None:
        """Raises OSError when the program cannot be started (not found, not executable)."""
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            **(self.run_as.popen_kwargs() if self.run_as else {}),
        )
        self._reader = threading.Thread(target=self._read, name=f"out-{self.pid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self.popen.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.tail.write(decoder.decode(chunk))
        self.tail.write(decoder.decode(b"", final=True))

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running."""
        assert self.popen is not None
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._finish()
        return code

    def _finish(self) -> None:
        # Whatever the command left running in its group would hold the GPUs: stop it too.
        self._signal(signal.SIGKILL)
        if self._reader is not None:
            # A grandchild outside the group may keep the pipe open; do not wait on it long.
            self._reader.join(timeout=2.0)
        if self.popen is not None and self.popen.stdout is not None:
            self.popen.stdout.close()

    def _signal(self, sig: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM the group, SIGKILL it after `grace_s`; returns the exit status."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait()
        self._finish()
        return self.popen.returncode


class ChildRegistry:
    """Process groups this agent started, in a journal file, so that the next agent can stop
    orphans.

    After a crash (kill -9) the children live on in their own sessions, holding GPUs that the
    control plane may already have given to someone else. Each start appends one line (one
    write: a task's start waits on it, and rewriting the file and renaming it over the old
    one cost more than the rest of the start). An end is not written: an orphan is stopped
    only when its pid and its start time both still match, so a line left by a child that
    ended is harmless. The journal is rewritten with the live children alone once it holds
    many more lines than those.
    """

    COMPACT_AT = 256  # lines; or four per live child, whichever is more

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, object]] = {}
        self._fd: int | None = None
        self._lines = 0

    def add(self, child: Child, label: str) -> None:
        if child.pid is None:
            return
        try:
            started = psutil.Process(child.pid).create_time()
        except psutil.Error:
            return
        entry: dict[str, object] = {"label": label, "started": started}
        with self._lock:
            self._entries[str(child.pid)] = entry
            if self._lines >= max(self.COMPACT_AT, 4 * len(self._entries)):
                self._rewrite()
            else:
                self._append(str(child.pid), entry)

    def remove(self, child: Child) -> None:
        with self._lock:
            self._entries.pop(str(child.pid), None)

    def _append(self, pid: str, entry: dict[str, object]) -> None:
        if self.path is None:
            return
        try:
            if self._fd is None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                self._fd = os.open(self.path, flags, 0o600)
            os.write(self._fd, _line(pid, entry))
            self._lines += 1
        except OSError as exc:
            self._cannot_record(exc)

    def _rewrite(self) -> None:
        """The journal with the live children only (written aside, then renamed over it)."""
        if self.path is None:
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_bytes(b"".join(_line(pid, e) for pid, e in self._entries.items()))
            tmp.replace(self.path)
            self._lines = len(self._entries)
        except OSError as exc:
            self._cannot_record(exc)

    def _cannot_record(self, exc: OSError) -> None:
        # Only the clean-up after a crash depends on this file; the work itself goes on.
        log.warning("cannot record child processes in %s: %s", self.path, exc.strerror)

    def stop_orphans(self) -> list[str]:
        """Kill the groups a previous agent left (same pid and start time); return their labels."""
        if self.path is None or not self.path.exists():
            return []
        try:
            entries = _read_journal(self.path.read_text())
        except OSError:
            entries = {}
        stopped = []
        for pid, entry in entries.items():
            try:
                alive = psutil.Process(int(pid)).create_time() == entry.get("started")
            except (psutil.Error, ValueError):
                alive = False
            if alive:
                try:
                    os.killpg(int(pid), signal.SIGKILL)
                    stopped.append(str(entry.get("label")))
                except (ProcessLookupError, PermissionError):
                    pass
        with self._lock:
            self._entries = {}
            self._rewrite()
        return stopped


def _line(pid: str, entry: dict[str, object]) -> bytes:
    return (json.dumps({"pid": pid, **entry}) + "\n").encode()


def _read_journal(text: str) -> dict[str, dict[str, object]]:
    """pid -> its last entry. A line cut short by a crash is skipped. A file written before
    the journal (one JSON object of pid -> entry) still reads."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "pid" not in whole:
        return {str(k): v for k, v in whole.items() if isinstance(v, dict)}
    entries: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "pid" in entry:
            entries[str(entry.pop("pid"))] = entry
    return entries
