"""The tailer, driven poll by poll on real files: rotation, truncation, late files, huge
lines, partial lines, starting at the end or backfilling."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smart_agent.watch.tailer import CAUGHT_UP, REWOUND, FileTailer


class Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.notices: list[str] = []

    def line(self, path: Path, text: str) -> None:
        self.lines.append(text)

    def notice(self, path: Path, what: str) -> None:
        self.notices.append(what)

    def take(self) -> list[str]:
        out, self.lines = self.lines, []
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def append(path: Path, text: str | bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(text.encode() if isinstance(text, str) else text)


def tailer(path: Path, sink: Sink, **kwargs) -> FileTailer:  # type: ignore[no-untyped-def]
    return FileTailer(path, sink.line, on_notice=sink.notice, **kwargs)


def test_starts_at_the_end_and_follows_appends(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("old 1\nold 2\n")
    sink = Sink()
    t = tailer(log, sink)
    assert t.poll() == 0
    append(log, "new 1\nnew 2\n")
    assert t.poll() == 2
    assert sink.take() == ["new 1", "new 2"]
    assert t.poll() == 0 and sink.notices == [CAUGHT_UP]


def test_backfill_reads_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("old 1\nold 2\n")
    sink = Sink()
    tailer(log, sink, from_end=False).poll()
    assert sink.take() == ["old 1", "old 2"]


def test_a_line_being_written_at_start_is_skipped_whole(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("done\nhalf a li")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    append(log, "ne\nnext\n")
    t.poll()
    assert sink.take() == ["next"]


def test_partial_lines_wait_for_their_end(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.touch()
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    append(log, "epoch 1/3")
    t.poll()
    assert sink.take() == []
    append(log, " done\r\nEpoch 2: 50%\rEpoch 2: 100%\n\n   \n")
    t.poll()
    assert sink.take() == ["epoch 1/3 done", "Epoch 2: 50%", "Epoch 2: 100%"]


def test_rename_rotation_reads_the_old_file_to_its_end_then_the_new(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink, clock = Sink(), Clock()
    t = tailer(log, sink, clock=clock, grace_s=5.0)
    t.poll()
    append(log, "before rotation\n")
    t.poll()
    assert sink.take() == ["before rotation"]
    append(log, "written just before the rename\nunfinished")
    os.rename(log, tmp_path / "a.log.1")
    log.write_text("first of new\n")
    t.poll()
    assert sink.take() == ["written just before the rename", "first of new"]
    assert REWOUND in sink.notices and t.stats.rotations == 1
    # The writer had not reopened yet: it finishes its line in the old file.
    append(tmp_path / "a.log.1", " line\n")
    clock.now = 6.0
    t.poll()
    assert sink.take() == ["unfinished line"]
    assert not t.is_draining()


def test_copytruncate(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    append(log, "one\ntwo\n")
    t.poll()
    (tmp_path / "a.log.1").write_bytes(log.read_bytes())
    with open(log, "r+b") as handle:
        handle.truncate(0)
    append(log, "three\n")
    t.poll()
    assert sink.take() == ["one", "two", "three"]
    assert t.stats.truncations == 1 and sink.notices.count(REWOUND) == 1


def test_rewritten_in_place_longer_than_before(tmp_path: Path) -> None:
    # Truncated and refilled past the old offset between two polls: the start differs.
    log = tmp_path / "snap.txt"
    log.write_text("JOBID ST\n1 R\n")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    log.write_text("JOBID  ST\n2 PD\n3 R\n4 R\n")
    t.poll()
    assert sink.take() == ["JOBID  ST", "2 PD", "3 R", "4 R"]
    assert t.stats.truncations == 1


def test_a_file_that_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    sink = Sink()
    t = tailer(log, sink)
    assert t.poll() == 0
    log.write_text("hello\n")
    t.poll()
    assert sink.take() == ["hello"]


def test_deleted_then_recreated(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    log.unlink()
    t.poll()
    log.write_text("again\n")
    t.poll()
    assert sink.take() == ["again"]


def test_huge_lines_are_cut_and_never_buffered_whole(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink = Sink()
    t = tailer(log, sink, max_line_bytes=100, read_bytes=64)
    t.poll()
    append(log, "x" * 1000)
    t.poll()
    append(log, "y" * 1000 + "\nshort\n" + "z" * 150 + "\n")
    t.poll()
    lines = sink.take()
    assert lines == ["x" * 100, "short", "z" * 100]
    assert t.stats.cut == 2


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    append(log, b"caf\xc3\xa9 \xff\xfe ok\n")
    t.poll()
    assert sink.take() == ["café \ufffd\ufffd ok"]


def test_close_and_resume_where_it_was(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    sink = Sink()
    t = tailer(log, sink)
    t.poll()
    append(log, "a\n")
    t.poll()
    t.close()
    assert not t.is_open
    append(log, "b\n")
    t.poll()
    assert sink.take() == ["a", "b"] and t.is_open


def test_a_big_backlog_is_read_in_bounded_polls(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("line\n" * 10_000)
    sink = Sink()
    t = tailer(log, sink, from_end=False, max_poll_bytes=10_000, read_bytes=4096)
    t.poll()
    assert t.more and 0 < len(sink.lines) < 10_000
    while t.more:
        t.poll()
    assert len(sink.take()) == 10_000


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_not_a_regular_file_is_ignored(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    sink = Sink()
    assert tailer(fifo, sink).poll() == 0


@settings(max_examples=40, deadline=None)
@given(
    lines=st.lists(
        st.text(st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)), max_size=30),
        max_size=20,
    ),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
def test_any_split_of_the_writes_gives_the_same_lines(lines: list[str], cuts: list[int]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "a.log"
        log.write_bytes(b"")
        sink = Sink()
        t = tailer(log, sink, max_line_bytes=50)
        t.poll()
        for start, end in itertools.pairwise(points):
            append(log, data[start:end])  # a write may end anywhere, even inside a character
            t.poll()
    expected = [
        line.encode()[:50].decode("utf-8", "replace")
        for line in lines
        if line.encode()[:50].strip()
    ]
    assert sink.lines == expected
