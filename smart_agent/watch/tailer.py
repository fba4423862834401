"""Follows one file by its path, line by line, through rotation, truncation and rewrites."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

LineCallback = Callable[[Path, str], None]
NoticeCallback = Callable[[Path, str], None]
REWOUND = "rewound"  # the file was truncated or replaced: next lines are from its start
CAUGHT_UP = "caught_up"  # all that was written so far has been read

HEAD_BYTES = 64  # start of the file kept to notice a rewrite that did not shrink it
MARK_BYTES = 64  # last bytes read, kept to recognise a copy of the file (copytruncate)


@dataclass(slots=True)
class TailStats:
    lines: int = 0
    bytes: int = 0
    cut: int = 0  # lines longer than max_line_bytes, delivered cut
    rotations: int = 0  # the path came to name another file (rename + create, delete)
    truncations: int = 0  # the same file shrank or was rewritten (copytruncate)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class _Reader:
    """An open file, how far it has been read, and the incomplete line at its end."""

    __slots__ = ("buf", "fd", "ident", "last", "offset", "skipping")

    def __init__(self, fd: int, ident: tuple[int, int], offset: int) -> None:
        self.fd = fd
        self.ident = ident
        self.offset = offset
        self.buf = bytearray()
        self.skipping = False  # dropping the rest of a cut (or partly skipped) line
        self.last = b""  # the bytes just before offset (up to MARK_BYTES)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class FileTailer:
    """Delivers each complete line of `path` to `on_line(path, text)`.

    - Starts at the end of an existing file (the rest of a line being written there is
      skipped) unless `from_end` is false; a file that appears later is read from its start.
    - Rotation by rename + create: the old file is read to its end (and for `grace_s` more,
      while the writer may still append to it), then the new one from its start.
    - Truncation (copytruncate) or a rewrite in place: read again from the start.
    - A line over `max_line_bytes` is cut there and the rest of it dropped; no more than
      that is ever buffered for one line. `\\r` ends a line too (progress bars).
    - Bytes are decoded as UTF-8 with replacement characters; blank lines are dropped.

    `poll()` does the work (the watcher calls it on file events and on a timer); one thread
    at a time. An idle file's descriptor can be closed with `close()` and the tailer resumes
    where it was on the next poll, if the file is still the same.
    """

    def __init__(
        self,
        path: Path,
        on_line: LineCallback,
        *,
        from_end: bool = True,
        max_line_bytes: int = 64 * 1024,
        read_bytes: int = 64 * 1024,
        max_poll_bytes: int = 8 * 1024 * 1024,
        grace_s: float = 5.0,
        on_notice: NoticeCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.on_line = on_line
        self.on_notice = on_notice
        self.from_end = from_end
        self.max_line_bytes = max_line_bytes
        self.read_bytes = read_bytes
        self.max_poll_bytes = max_poll_bytes
        self.grace_s = grace_s
        self.clock = clock
        self.stats = TailStats()
        self.more = False  # the last poll stopped at max_poll_bytes: poll again soon
        self.grew_at = float("-inf")  # clock time bytes were last read
        self._reader: _Reader | None = None
        self._ident: tuple[int, int] | None = None  # the file followed, open or not
        self._offset = 0
        self._head = b""
        self._draining: tuple[_Reader, float] | None = None
        self._started = False
        self._initial_offset = 0
        self._adopted: tuple[bytes, bool] | None = None
        self._mtime_ns = 0
        self._rewound = False  # send caught_up at the next end of file, even if empty
        self._marks: list[tuple[int, bytes]] = []  # (offset, last bytes) before truncations

    # -- public --------------------------------------------------------------------------

    def poll(self) -> int:
        """Read what is new; returns the number of lines delivered."""
        before = self.stats.lines
        budget = self.max_poll_bytes
        self.more = False
        if self._draining is not None:
            budget -= self._drain()
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is not None and not _regular(st.st_mode):
            st = None
        if st is not None:
            ident = (st.st_dev, st.st_ino)
            if self._ident is not None and ident != self._ident:
                self._rotated()
            changed = st.st_size != self._offset or st.st_mtime_ns != self._mtime_ns
            self._mtime_ns = st.st_mtime_ns
            if self._ident is None:
                self._open_new()
                changed = True
            elif changed:
                if self._reader is None:
                    self._reopen()
                if st.st_size < self._offset or not self._same_head() or not self._same_tail():
                    self._truncated()
            if self._reader is not None and changed:
                read, eof = self._read(self._reader, budget)
                if read:
                    self.grew_at = self.clock()
                self._offset = self._reader.offset
                self.more = not eof
                if eof and (read or self._rewound):
                    self._rewound = False
                    self._notice(CAUGHT_UP)
        elif self._ident is not None:
            self._rotated()  # deleted or renamed away, nothing in its place yet
        self._started = True
        return self.stats.lines - before

    @property
    def has_partial(self) -> bool:
        """Bytes of an unterminated last line are waiting for their newline."""
        reader = self._reader
        return reader is not None and bool(reader.buf) and not reader.skipping

    def flush_partial(self) -> int:
        """The writer has been quiet: deliver the unterminated last line (a crash log's
        last words often have no newline). What the writer adds to it later comes as a
        line of its own. Returns the number of lines delivered (0 or 1)."""
        reader = self._reader
        if reader is None or not reader.buf or reader.skipping:
            return 0
        before = self.stats.lines
        self._flush(reader)
        return self.stats.lines - before

    def close(self) -> None:
        """Close the descriptors; the next poll reopens the file where it was."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._draining is not None:
            self._flush(self._draining[0])
            self._draining[0].close()
            self._draining = None

    @property
    def is_open(self) -> bool:
        return self._reader is not None

    @property
    def ident(self) -> tuple[int, int] | None:
        return self._ident

    @property
    def offset(self) -> int:
        return self._offset

    def is_draining(self, ident: tuple[int, int] | None = None) -> bool:
        """Whether a rotated-away file (`ident`, or any) is still being read."""
        draining = self._draining
        return draining is not None and (ident is None or draining[0].ident == ident)

    def marks(self) -> list[tuple[int, bytes]]:
        """(offset, the bytes just before it) for the file followed now, one rotated away
        and being drained, and the file as it was before its last truncations: a new file
        holding those bytes at that offset is a copy of what was read here."""
        out = list(self._marks)
        for reader in (self._reader, self._draining[0] if self._draining else None):
            if reader is not None and reader.last:
                out.append((reader.offset, reader.last))
        return out

    def resume_at(self, offset: int) -> None:
        """Before the first poll: start at `offset` (a file known under another name)."""
        self.from_end = False
        self._initial_offset = offset

    def release(self, ident: tuple[int, int]) -> tuple[int, bytes, bool] | None:
        """Give up the file `ident` (now followed under another name): returns where it
        was read to, its unfinished line and whether that line is being skipped. The next
        poll treats this path as rotated."""
        reader = None
        if self._draining is not None and self._draining[0].ident == ident:
            reader, self._draining = self._draining[0], None
        elif self._ident == ident:
            reader, self._reader = self._reader, None
            offset = self._offset if reader is None else reader.offset
            self._lost()
            if reader is None:
                return offset, b"", False
        if reader is None:
            return None
        reader.close()
        return reader.offset, bytes(reader.buf), reader.skipping

    def adopt(self, offset: int, partial: bytes, skipping: bool) -> None:
        """Before the first poll: continue a file another tailer was reading."""
        self.resume_at(offset)
        self._adopted = (partial, skipping)

    # -- file switching ------------------------------------------------------------------

    def _open(self) -> tuple[int, os.stat_result] | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        st = os.fstat(fd)
        if not _regular(st.st_mode):
            os.close(fd)
            return None
        return fd, st

    def _open_new(self) -> None:
        opened = self._open()
        if opened is None:
            return
        fd, st = opened
        offset = 0
        skipping = False
        if not self._started and self.from_end:
            offset = st.st_size
            # Starting inside a line being written: skip the rest of it.
            skipping = offset > 0 and os.pread(fd, 1, offset - 1) != b"\n"
        elif not self._started:
            offset = min(self._initial_offset, st.st_size)
        os.lseek(fd, offset, os.SEEK_SET)
        self._reader = _Reader(fd, (st.st_dev, st.st_ino), offset)
        self._reader.skipping = skipping
        if self._adopted is not None and not self._started:
            self._reader.buf += self._adopted[0]
            self._reader.skipping = self._adopted[1]
        self._adopted = None
        self._ident, self._offset = self._reader.ident, offset
        self._head = os.pread(fd, HEAD_BYTES, 0)

    def _reopen(self) -> None:
        opened = self._open()
        if opened is None:
            return
        fd, st = opened
        if (st.st_dev, st.st_ino) != self._ident:
            os.close(fd)  # replaced between stat and open: the next poll sees it
            return
        os.lseek(fd, self._offset, os.SEEK_SET)
        self._reader = _Reader(fd, self._ident, self._offset)

    def _rotated(self) -> None:
        self.stats.rotations += 1
        if self._reader is not None:
            if self._draining is not None:
                self._flush(self._draining[0])
                self._draining[0].close()
            self._draining = (self._reader, self.clock() + self.grace_s)
            self._reader = None
            self._drain()
        self._lost()

    def _lost(self) -> None:
        """The path no longer names the file followed: what comes next is read from its
        start."""
        self._reader = None
        self._ident = None
        self._offset = 0
        self._head = b""
        self._started = True
        self._rewound = True
        self._notice(REWOUND)

    def _truncated(self) -> None:
        self.stats.truncations += 1
        if self._reader is None:
            self._reopen()
        if self._reader is not None:
            if self._reader.last:
                self._marks = [(self._reader.offset, self._reader.last), *self._marks[:3]]
            os.lseek(self._reader.fd, 0, os.SEEK_SET)
            self._reader.offset = 0
            self._reader.last = b""
            self._reader.buf.clear()
            self._reader.skipping = False
            self._head = os.pread(self._reader.fd, HEAD_BYTES, 0)
        self._offset = 0
        self._rewound = True
        self._notice(REWOUND)

    def _same_head(self) -> bool:
        """Whether the file still starts as it did (else it was rewritten in place)."""
        if self._reader is None:
            return True
        head = os.pread(self._reader.fd, HEAD_BYTES, 0)
        if head[: len(self._head)] != self._head:
            return False
        self._head = head
        return True

    def _same_tail(self) -> bool:
        """Whether the bytes read last are still where they were: a file rewritten in
        place (`sacct > file` from cron or `watch`) that grew is not an append."""
        reader = self._reader
        if reader is None or not reader.last or reader.offset < len(reader.last):
            return True
        at = reader.offset - len(reader.last)
        try:
            return os.pread(reader.fd, len(reader.last), at) == reader.last
        except OSError:
            return True

    def _drain(self) -> int:
        """Read the rotated-away file; close it when its grace time is over."""
        assert self._draining is not None
        reader, deadline = self._draining
        read, _ = self._read(reader, self.max_poll_bytes)
        if self.clock() >= deadline:
            self._flush(reader)
            reader.close()
            self._draining = None
        return read

    # -- reading -------------------------------------------------------------------------

    def _read(self, reader: _Reader, budget: int) -> tuple[int, bool]:
        total = 0
        while total < budget:
            try:
                data = os.read(reader.fd, min(self.read_bytes, budget - total))
            except OSError:
                return total, True
            if not data:
                return total, True
            total += len(data)
            reader.offset += len(data)
            reader.last = (reader.last + data[-MARK_BYTES:])[-MARK_BYTES:]
            self._consume(reader, data)
        return total, False

    def _consume(self, reader: _Reader, data: bytes) -> None:
        self.stats.bytes += len(data)
        if b"\r" in data:
            data = data.replace(b"\r", b"\n")
        parts = data.split(b"\n")
        tail = parts.pop()
        limit = self.max_line_bytes
        buf = reader.buf
        for part in parts:
            if reader.skipping:
                reader.skipping = False
                continue
            if buf:
                part = bytes(buf) + part
                buf.clear()
            self._deliver(part, limit)
        if reader.skipping:
            return
        if len(buf) + len(tail) > limit:
            self._deliver(bytes(buf) + tail, limit)
            buf.clear()
            reader.skipping = True
        else:
            buf += tail

    def _deliver(self, part: bytes, limit: int) -> None:
        if len(part) > limit:
            part = part[:limit]
            self.stats.cut += 1
        if not part or part.isspace():
            return
        self.stats.lines += 1
        self.on_line(self.path, part.decode("utf-8", "replace"))

    def _flush(self, reader: _Reader) -> None:
        """The file will not be read again: its unterminated last line is a line."""
        if reader.buf and not reader.skipping:
            self._deliver(bytes(reader.buf), self.max_line_bytes)
        reader.buf.clear()

    def _notice(self, what: str) -> None:
        if self.on_notice is not None:
            self.on_notice(self.path, what)


def _regular(mode: int) -> bool:
    return (mode & 0o170000) == 0o100000
