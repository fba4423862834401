"""Process watch: matching command lines start and finish jobs, once, top process only."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from predictors.types import EventKind
from smart_agent.procwatch import SOURCE, ProcessWatcher, ProcInfo, PsutilSource
from tests.support.procs import wait_for


class Procs:
    """A process table the test edits by hand."""

    def __init__(self) -> None:
        self.table: dict[int, ProcInfo] = {}

    def add(self, pid: int, cmd: str, *, ppid: int = 1, started: float = 1000.0) -> None:
        self.table[pid] = ProcInfo(pid, ppid, started, tuple(cmd.split()), 1000)

    def __call__(self) -> list[ProcInfo]:
        return list(self.table.values())


def watcher(procs: Procs, **kwargs) -> ProcessWatcher:  # type: ignore[no-untyped-def]
    return ProcessWatcher(
        ["torchrun", r"python .*train\.py", "sbatch"], user="alice", source=procs, **kwargs
    )


def test_start_and_finish_once_each() -> None:
    procs = Procs()
    procs.add(10, "bash")
    w = watcher(procs)
    assert w.scan(now=1000.0) == []
    procs.add(11, "torchrun --nproc_per_node=4 train.py", started=1001.0)
    (started,) = w.scan(now=1002.0)
    assert started.kind is EventKind.JOB_STARTED and started.at == 1001.0
    assert (started.gpus, started.source, started.user) == (4, SOURCE, "alice")
    assert started.cue == "process_started" and started.job_id == "pid11@1001"
    assert started.excerpt == "torchrun --nproc_per_node=4 train.py"
    assert w.scan(now=1003.0) == []
    del procs.table[11]
    (finished,) = w.scan(now=1100.0)
    assert finished.kind is EventKind.JOB_FINISHED and finished.duration_s == 99.0
    assert finished.job_id == started.job_id and finished.at == 1100.0
    assert w.scan(now=1101.0) == []


def test_workers_under_a_matching_launcher_are_not_jobs() -> None:
    procs = Procs()
    procs.add(20, "torchrun --nproc_per_node=2 train.py")
    procs.add(21, "python -u train.py --local-rank 0", ppid=20)
    procs.add(22, "python -u train.py --local-rank 1", ppid=20)
    procs.add(23, "python -u train.py", ppid=99)  # a launch of its own
    events = watcher(procs).scan(now=2000.0)
    assert sorted(e.job_id for e in events) == ["pid20@1000", "pid23@1000"]


def test_existing_processes_can_be_left_unreported() -> None:
    procs = Procs()
    procs.add(30, "sbatch job.sh")
    w = watcher(procs, report_existing=False)
    assert w.scan(now=1.0) == []
    procs.add(31, "sbatch job2.sh")
    assert [e.job_id for e in w.scan(now=2.0)] == ["pid31@1000"]
    del procs.table[30]
    assert [e.kind for e in w.scan(now=3.0)] == [EventKind.JOB_FINISHED]


def test_a_reused_pid_is_a_new_process() -> None:
    procs = Procs()
    procs.add(40, "torchrun a.py", started=10.0)
    w = watcher(procs)
    w.scan(now=11.0)
    procs.add(40, "torchrun b.py", started=20.0)
    kinds = sorted(e.kind.value for e in w.scan(now=21.0))
    assert kinds == ["job_finished", "job_started"]


def test_secrets_on_the_command_line_are_redacted_and_callback_gets_events() -> None:
    procs = Procs()
    got = []
    w = ProcessWatcher(["train"], got.append, user="alice", source=procs)
    procs.add(50, "python train.py --api-key sk-proj-abcdefghijklmnopqrstuvwxyz0123")
    w.scan(now=1.0)
    assert len(got) == 1 and "abcdefghijklmnop" not in repr(got[0])


def test_a_failing_process_source_is_counted() -> None:
    def broken() -> list[ProcInfo]:
        raise PermissionError("no /proc")

    w = ProcessWatcher(["x"], user="alice", source=broken)
    assert w.scan(now=1.0) == [] and w.errors == 1


def test_a_real_process_is_seen_start_and_finish() -> None:
    marker = f"jitgpu_probe_{os.getpid()}_{time.time_ns()}"
    got = []
    w = ProcessWatcher(
        [rf"{marker}\.py"],
        got.append,
        user="alice",
        interval_s=0.1,
        source=PsutilSource(os.getuid()),
    )
    w.start()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", f"{marker}.py"])
    try:
        wait_for(
            lambda: any(e.kind is EventKind.JOB_STARTED for e in got),
            timeout=10,
            what="the probe process seen",
        )
        proc.kill()
        proc.wait(5)
        wait_for(
            lambda: any(e.kind is EventKind.JOB_FINISHED for e in got),
            timeout=10,
            what="the probe process gone",
        )
    finally:
        proc.kill()
        w.stop()
    started = next(e for e in got if e.kind is EventKind.JOB_STARTED)
    assert started.job_id.startswith(f"pid{proc.pid}@") and marker in (started.excerpt or "")
    assert abs(started.at - time.time()) < 60
