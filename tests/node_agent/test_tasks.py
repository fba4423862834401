"""Tasks and child processes: exit status, output tail, stopping the group, orphan clean-up."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from control_plane.node_agent.procs import Child, ChildRegistry
from control_plane.node_agent.tasks import Task
from tests.node_agent.helpers import Ticks, base_env, gone, read_pid
from tests.support.procs import wait_for


def task(tmp_path: Path, command: list[str], **kw) -> tuple[Task, threading.Event]:  # type: ignore[no-untyped-def]
    done = threading.Event()
    t = Task(
        "alloc_1",
        command,
        gpu_uuids=["GPU-9"],
        cwd=tmp_path,
        env=base_env(),
        clock=kw.pop("clock", Ticks([10.0, 13.0])),
        on_done=done.set,
        **kw,
    )
    t.start()
    return t, done


def test_exit_zero_is_exited_with_output_and_gpus_visible(tmp_path: Path) -> None:
    t, done = task(
        tmp_path, ["sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES alloc=$JITGPU_ALLOCATION_ID"]
    )
    assert done.wait(10)
    assert (t.status, t.exit_code, t.seconds) == ("exited", 0, 3.0)
    assert "gpus=GPU-9 alloc=alloc_1" in t.tail.text()


def test_non_zero_exit_is_failed(tmp_path: Path) -> None:
    t, done = task(tmp_path, [sys.executable, "-c", "import sys; print('boom'); sys.exit(4)"])
    assert done.wait(10)
    assert (t.status, t.exit_code) == ("failed", 4)
    assert "boom" in t.tail.text()


def test_missing_program_is_failed_127(tmp_path: Path) -> None:
    t, done = task(tmp_path, ["no-such-program-for-jitgpu"])
    assert done.is_set()
    assert (t.status, t.exit_code) == ("failed", 127)


def test_stop_ends_the_whole_group_and_says_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    t, done = task(
        tmp_path,
        ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"],
    )
    background = wait_for(lambda: read_pid(pidfile), timeout=5, what="the task to start")
    assert t.status == "running" and not done.is_set()
    t.stop(grace_s=5)
    assert done.wait(10)
    assert t.status == "stopped" and t.exit_code is not None and t.exit_code < 0
    wait_for(lambda: gone(background), timeout=5, what="the background process to die")


def test_stop_escalates_to_sigkill_after_the_grace(tmp_path: Path) -> None:
    t, done = task(tmp_path, ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"])
    wait_for(lambda: "ready" in t.tail.text(), timeout=5, what="the trap to be set")
    t.stop(grace_s=0.2)
    assert done.wait(10)
    assert t.status == "stopped" and t.exit_code == -9


def test_leftover_processes_die_with_the_task(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    t, done = task(tmp_path, ["sh", "-c", f"sleep 60 > /dev/null & echo $! > {pidfile}"])
    assert done.wait(10) and t.status == "exited"
    daemon = read_pid(pidfile)
    assert daemon is not None
    wait_for(lambda: gone(daemon), timeout=5, what="the left-over process to be killed")


def test_registry_stops_orphans_of_a_previous_agent(tmp_path: Path) -> None:
    path = tmp_path / "children.json"
    child = Child(["sleep", "60"], env=base_env())
    child.start()
    assert child.pid is not None
    ChildRegistry(path).add(child, "task of allocation alloc_7")
    # A new agent (after a kill -9 of the old one) reads the same file.
    stopped = ChildRegistry(path).stop_orphans()
    assert stopped == ["task of allocation alloc_7"]
    assert child.wait(5) == -9
    assert ChildRegistry(path).stop_orphans() == []


def test_registry_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    path = tmp_path / "children.json"
    child = Child(["sleep", "60"], env=base_env())
    child.start()
    path.write_text(f'{{"{child.pid}": {{"label": "old", "started": 1.0}}}}')
    assert ChildRegistry(path).stop_orphans() == []
    assert child.wait(0.2) is None  # still running: it is not the process that was recorded
    child.stop(1)


def test_registry_reads_a_journal_cut_short_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "children.json"
    child = Child(["sleep", "60"], env=base_env())
    child.start()
    ChildRegistry(path).add(child, "task of allocation alloc_8")
    with path.open("a") as f:
        f.write('{"pid": "123", "lab')  # the last write, cut short by the crash
    assert ChildRegistry(path).stop_orphans() == ["task of allocation alloc_8"]
    assert child.wait(5) == -9


class _Pid:
    """A stand-in child with a real pid, for the journal's bookkeeping (never stopped here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid


def test_registry_journal_stays_small_over_many_children(tmp_path: Path) -> None:
    path = tmp_path / "children.json"
    registry = ChildRegistry(path)
    live, ended = _Pid(os.getppid()), _Pid(os.getpid())
    registry.add(live, "the long task")  # type: ignore[arg-type]
    for _ in range(3 * ChildRegistry.COMPACT_AT):
        registry.add(ended, "a short task")  # type: ignore[arg-type]
        registry.remove(ended)  # type: ignore[arg-type]
    # Rewritten with the live children whenever it grew past the bound, and never losing one.
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) <= ChildRegistry.COMPACT_AT
    assert {"pid": str(live.pid), "label": "the long task"}.items() <= lines[0].items()
