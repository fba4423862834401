"""Genuine sacct: a real slurmctld, slurmd and slurmdbd (with its own MariaDB) run GPU jobs of
1 and 2 GPUs, a failure, an array and a time-out. The smart agent's Slurm source polls the real
`sacct` (never falling back to squeue) and sees each job arrive, start and end once, with its
GPUs and its final state, at the times Slurm states; the same `sacct -P` output saved to a
file and read the way the agent reads files gives the same events."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from control_plane.slurm_bridge import local_accounting, local_cluster
from predictors.types import Event, EventKind
from smart_agent.inspection import inspect_file
from smart_agent.slurm_source import SlurmSource, run_command
from tests.support.procs import wait_for
from tests.support.slurm_cluster import SlurmCluster, SlurmUnavailable, start_or_skip


@pytest.fixture
def cluster() -> Iterator[SlurmCluster]:
    began = time.monotonic()
    cluster = start_or_skip(accounting=True, boot_delay_s=1.0, gpus_per_node=4)
    # slurmdbd and its database cost seconds, not minutes (about 5 s on two busy cores).
    assert time.monotonic() - began < 60
    try:
        yield cluster
    finally:
        cluster.stop()


def _key(event: Event) -> tuple:
    return (event.kind.value, event.job_id, event.gpus, event.at, event.duration_s, event.user)


@pytest.mark.slurm
def test_sacct_polled_live_and_saved_to_a_file_give_each_jobs_events(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The source runs the genuine commands with this cluster's slurm.conf; what each poll
    # printed is kept, as `watch 'sacct -P >> jobs.txt'` would keep it.
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.env["PATH"])
    printed: list[tuple[str, str]] = []

    def run(argv: Sequence[str], timeout: float) -> str:
        out = run_command(argv, timeout)
        printed.append((argv[0], out))
        return out

    got: list[Event] = []
    began = time.time()
    read_at = began - 3600  # the source's clock: no event may carry it, Slurm states each time
    source = SlurmSource(got.append, user="root", run=run, clock=lambda: read_at)
    assert source.poll_once() == []  # the baseline: no job yet

    # First, so that it runs on the node that is up; the others fill it and the cloud node.
    late = cluster.sbatch("--gres=gpu:1", "--time=5", "--wrap=sleep 300")
    one = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 3")
    two = cluster.sbatch("--gres=gpu:2", "--wrap=sleep 3")
    failed = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 2; exit 1")
    array = cluster.sbatch("--array=0-1", "--gres=gpu:1", "--wrap=sleep 2")
    wait_for(
        lambda: cluster.job_field(late, "JobState") == "RUNNING",
        timeout=20,
        what="the time-limited job to run",
    )
    # Slurm's smallest limit is a minute: moving the end time to now leaves the ending to
    # slurmctld's own time-limit check (every 30 s), a genuine TIMEOUT.
    cluster.scontrol("update", f"JobId={late}", "EndTime=now")
    gpus = {late: 1, one: 1, two: 2, failed: 1, f"{array}_0": 1, f"{array}_1": 1}

    def ended() -> bool:
        source.poll_once()
        return {e.job_id for e in got if e.kind == EventKind.JOB_FINISHED} >= set(gpus)

    wait_for(ended, timeout=75, interval=1, what=f"every end in sacct\n{printed[-1][1]}")
    source.poll_once()  # one more: nothing is reported twice

    assert source.mode == "sacct" and source.errors == 0
    assert {cmd for cmd, _ in printed} == {"sacct"}  # squeue never asked
    for kind in (EventKind.JOB_SUBMITTED, EventKind.JOB_STARTED, EventKind.JOB_FINISHED):
        events = [e for e in got if e.kind == kind]
        assert Counter(e.job_id for e in events) == Counter(set(gpus)), kind  # each job once
        assert {e.job_id: e.gpus for e in events} == gpus, kind  # GPUs from AllocTRES
    assert source.parser is not None
    states = {job: source.parser.records[job]["state"] for job in gpus}
    assert states == {
        late: "TIMEOUT",
        one: "COMPLETED",
        two: "COMPLETED",
        failed: "FAILED",
        f"{array}_0": "COMPLETED",
        f"{array}_1": "COMPLETED",
    }
    # Slurm's own times (whole seconds), in order per job; ends carry how long the job ran
    # (Elapsed). A job given the cloud node while it boots shows RUNNING from then on, but its
    # Elapsed, and later its Start, count from the boot's end: no longer than start to end.
    assert all(e.user == "root" and int(began) <= e.at <= time.time() for e in got)
    at = {(e.job_id, e.kind): e.at for e in got}
    for job in gpus:
        submitted, started, finished = (
            at[job, k]
            for k in (EventKind.JOB_SUBMITTED, EventKind.JOB_STARTED, EventKind.JOB_FINISHED)
        )
        assert submitted <= started <= finished
        end = next(e for e in got if e.job_id == job and e.kind == EventKind.JOB_FINISHED)
        assert end.duration_s is not None and 0 < end.duration_s <= finished - started
    assert at[late, EventKind.JOB_FINISHED] - at[late, EventKind.JOB_STARTED] >= 1

    # The same output saved to a file, read by the agent's file path: the same events.
    saved = tmp_path / "jobs.txt"
    saved.write_text("".join(out for _, out in printed))
    read = inspect_file(saved, user="root", now=read_at)
    assert (read.kind, read.layout, read.notes) == ("sacct", "pipe (-P)", [])
    assert sorted(_key(e) for _, e in read.events) == sorted(_key(e) for e in got)
    # Each job's last row; the pending array's placeholder row too (it gave no events).
    assert {job: (row["state"], row["gpus"]) for job, row in read.jobs.items()} == {
        **{job: (states[job], n) for job, n in gpus.items()},
        f"{array}_[0-1]": ("PENDING", 1),
    }


def test_a_missing_accounting_binary_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_cluster, "missing_binaries", lambda: [])
    real = local_accounting.find_binary
    monkeypatch.setattr(
        local_accounting, "find_binary", lambda name: None if name == "mariadbd" else real(name)
    )
    with pytest.raises(
        SlurmUnavailable, match=r"'mariadbd'.*apt-get install slurmdbd mariadb-server"
    ):
        local_cluster.SlurmCluster(accounting=True)
