"""The watcher over folders: globs, files found later, rotation inside a watched folder,
limits; and with its thread, on native notifications and on polling."""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from smart_agent.watch import Watcher, WatchSpec
from smart_agent.watch import watcher as watcher_module
from tests.support.procs import wait_for


class Lines:
    def __init__(self) -> None:
        self.by_file: dict[str, list[str]] = defaultdict(list)

    def __call__(self, spec: WatchSpec, path: Path, text: str) -> None:
        self.by_file[path.name].append(text)


def append(path: Path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


def manual(specs: list[WatchSpec], **kwargs) -> tuple[Watcher, Lines]:  # type: ignore[no-untyped-def]
    lines = Lines()
    watcher = Watcher(specs, lines, **kwargs)
    watcher.start(background=False)
    return watcher, lines


def test_globs_late_files_and_skipped_folders(tmp_path: Path) -> None:
    for name in ("a.log", "b.jsonl", "c.tmp", "sub/d.log", ".git/x.log", "e.log.gz"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("old\n")
    spec = WatchSpec(tmp_path, include=("*.log", "*.jsonl"), exclude=("*.tmp", "*.gz"))
    watcher, lines = manual([spec])
    assert sorted(p.name for p in watcher.tailers) == ["a.log", "b.jsonl", "d.log"]
    for name in ("a.log", "b.jsonl", "c.tmp", "sub/d.log", ".git/x.log", "e.log.gz"):
        append(tmp_path / name, "new\n")
    (tmp_path / "sub" / "late.log").write_text("first\nsecond\n")
    watcher.poll_once(everything=True)
    assert dict(lines.by_file) == {
        "a.log": ["new"],
        "b.jsonl": ["new"],
        "d.log": ["new"],
        "late.log": ["first", "second"],
    }


def test_not_recursive(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.log").write_text("")
    (tmp_path / "sub" / "deep.log").write_text("")
    watcher, _ = manual([WatchSpec(tmp_path, recursive=False)])
    assert [p.name for p in watcher.tailers] == ["top.log"]


def test_backfill(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("one\ntwo\n")
    _, lines = manual([WatchSpec(tmp_path, backfill=True)])
    assert lines.by_file["a.log"] == ["one", "two"]


def test_rename_rotation_inside_the_folder_reads_each_line_once(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    watcher, lines = manual([WatchSpec(tmp_path, include=("*.log*",))])
    append(log, "1\n2\n")
    watcher.poll_once(everything=True)
    append(log, "3\n")
    os.rename(log, tmp_path / "train.log.1")  # logrotate without copytruncate
    log.write_text("4\n")
    append(tmp_path / "train.log.1", "3b\n")  # the writer had not reopened yet
    watcher.poll_once(everything=True)
    watcher.poll_once(everything=True)
    assert lines.by_file["train.log"] + lines.by_file["train.log.1"] in (
        ["1", "2", "4", "3", "3b"],
        ["1", "2", "3", "3b", "4"],
    )
    assert sorted(lines.by_file["train.log"] + lines.by_file["train.log.1"]) == [
        "1",
        "2",
        "3",
        "3b",
        "4",
    ]


def test_copytruncate_copy_gives_only_what_was_not_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    watcher, lines = manual([WatchSpec(tmp_path, include=("*.log*",))])
    append(log, "2024-05-01 10:00:00 read before the copy\n")
    watcher.poll_once(everything=True)
    append(log, "2024-05-01 10:00:01 written just before the copy\n")
    shutil.copyfile(log, tmp_path / "train.log.1")
    with open(log, "r+") as handle:
        handle.truncate(0)
    append(log, "after\n")
    watcher.poll_once(everything=True)
    assert lines.by_file["train.log"] == ["2024-05-01 10:00:00 read before the copy", "after"]
    assert lines.by_file["train.log.1"] == ["2024-05-01 10:00:01 written just before the copy"]


def test_a_new_file_with_the_same_banner_is_read_from_its_start(tmp_path: Path) -> None:
    banner = "GPU available: True (cuda), used: True\nTPU available: False, using: 0 TPU cores\n"
    (tmp_path / "a.log").write_text("")
    watcher, lines = manual([WatchSpec(tmp_path)])
    append(tmp_path / "a.log", banner + "run a\n")
    watcher.poll_once(everything=True)
    (tmp_path / "b.log").write_text(banner + "run b\n")
    watcher.poll_once(everything=True)
    assert lines.by_file["b.log"] == [*banner.splitlines(), "run b"]


def test_max_files_and_deleted_files(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"{i}.log").write_text("")
    now = [0.0]
    watcher, _ = manual([WatchSpec(tmp_path)], max_files=3, clock=lambda: now[0])
    assert len(watcher.tailers) == 3 and watcher.stats.files_skipped == 2
    for path in list(watcher.tailers):
        path.unlink()
    watcher.poll_once(everything=True)  # gone: each read to its end while its writer may
    now[0] = 10.0  # still write to it, for the rotation grace time
    watcher.poll_once(everything=True)
    watcher.poll_once(everything=True)
    assert len(watcher.tailers) == 2  # the deleted three forgotten, two more found
    assert watcher.stats.files_skipped == 0


def test_idle_files_are_closed_and_reopened(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    now = [0.0]
    watcher, lines = manual([WatchSpec(log)], idle_close_s=10.0, clock=lambda: now[0])
    ((_, tailer),) = watcher.tailers.values()
    append(log, "x\n")
    watcher.poll_once(everything=True)
    now[0] = 11.0
    watcher.poll_once(everything=True)
    assert not tailer.is_open
    append(log, "y\n")
    watcher.poll_once(everything=True)
    assert lines.by_file["a.log"] == ["x", "y"] and tailer.is_open


@pytest.mark.parametrize("polling", ["never", "always"])
def test_thread_follows_files_including_one_created_later(tmp_path: Path, polling: str) -> None:
    (tmp_path / "logs").mkdir()
    existing = tmp_path / "logs" / "a.log"
    existing.write_text("old\n")
    single = tmp_path / "later" / "b.log"  # its folder does not exist yet
    lines = Lines()
    watcher = Watcher(
        [WatchSpec(tmp_path / "logs"), WatchSpec(single)],
        lines,
        polling=polling,
        poll_s=0.1,
        rescan_s=0.2,
    )  # type: ignore[arg-type]
    watcher.start()
    try:
        assert watcher.stats.observer == ("polling" if polling == "always" else "native")
        append(existing, "new 1\n")
        (tmp_path / "logs" / "c.log").write_text("created\n")
        single.parent.mkdir()
        single.write_text("appeared\n")
        wait_for(
            lambda: len(lines.by_file) == 3 and len(lines.by_file["a.log"]) == 1,
            timeout=10,
            what="lines from three files",
        )
        append(existing, "new 2\n")
        wait_for(
            lambda: lines.by_file["a.log"] == ["new 1", "new 2"], timeout=10, what="a second line"
        )
    finally:
        watcher.stop()
    assert lines.by_file["c.log"] == ["created"] and lines.by_file["b.log"] == ["appeared"]


def test_falls_back_to_polling_when_native_notifications_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(watcher_module.Observer):  # type: ignore[misc,valid-type]
        def schedule(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(watcher_module, "Observer", Broken)
    log = tmp_path / "a.log"
    log.write_text("")
    lines = Lines()
    watcher = Watcher([WatchSpec(log)], lines, poll_s=0.1)
    watcher.start()
    try:
        assert watcher.stats.observer == "polling" and watcher.stats.fallbacks == 1
        append(log, "still read\n")
        wait_for(lambda: lines.by_file["a.log"], timeout=10, what="a line by polling")
    finally:
        watcher.stop()


def test_network_filesystems_are_polled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import psutil

    from smart_agent.watch.paths import is_network_fs

    class Part:
        def __init__(self, mountpoint: str, fstype: str) -> None:
            self.mountpoint, self.fstype = mountpoint, fstype

    parts = [Part("/", "ext4"), Part(str(tmp_path / "nfs"), "nfs4")]
    monkeypatch.setattr(psutil, "disk_partitions", lambda all=True: parts)
    assert is_network_fs(tmp_path / "nfs" / "logs")
    assert not is_network_fs(tmp_path / "local")
    assert not is_network_fs(tmp_path / "nfsx")


def test_an_idle_closed_file_that_is_deleted_is_forgotten(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("")
    now = [0.0]
    watcher, _ = manual([WatchSpec(tmp_path)], idle_close_s=1.0, clock=lambda: now[0])
    now[0] = 2.0
    watcher.poll_once(everything=True)
    ((_, tailer),) = watcher.tailers.values()
    assert not tailer.is_open
    (tmp_path / "a.log").unlink()
    watcher.poll_once(everything=True)
    assert watcher.tailers == {}
