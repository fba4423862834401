"""The Slurm source runs sacct (or squeue when sacct fails) with a fixed format, as real
processes (stand-in commands on PATH print the real samples' snapshots); the first poll is
a baseline, later polls report what changed, at the times the rows state."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from predictors.types import Event, EventKind
from smart_agent.slurm_source import (
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    SlurmConfig,
    SlurmSource,
    alive_jobs,
)

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"
DATA = Path(__file__).resolve().parents[1] / "data" / "smart_agent"
NOW = datetime(2026, 11, 27, tzinfo=UTC).timestamp()


def _snapshots(name: str, header_start: str) -> list[str]:
    out: list[list[str]] = []
    for line in (ROOT / name).read_text().splitlines(keepends=True):
        if line.startswith(header_start):
            out.append([])
        out[-1].append(line)
    return ["".join(s) for s in out if len(s) > 1]


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`sacct` and `squeue` that print $dir/<name>.out (exit 1 when it is missing) and
    record their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sacct", "squeue"):
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            f'echo "$@" > "{tmp_path}/{name}.args"\n'
            f'[ -f "{tmp_path}/{name}.out" ] || {{ echo "no accounting" >&2; exit 1; }}\n'
            f'cat "{tmp_path}/{name}.out"\n'
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_sacct_polled_with_a_fixed_format(fake_bin: Path) -> None:
    snapshots = _snapshots("sacct/G07_local_sacct_P_polled_appended.txt", "JobID|")
    got: list[Event] = []
    source = SlurmSource(got.append, user="alice", tz=UTC, clock=lambda: NOW)
    (fake_bin / "sacct.out").write_text(snapshots[0])
    first = source.poll_once()  # a baseline: jobs running then, at the times stated
    assert {e.job_id for e in first} == {"1", "2", "4", "3_3"} and all(e.at != NOW for e in first)
    args = (fake_bin / "sacct.args").read_text().split()
    assert args[:4] == ["-X", "-P", "-S", "now-1days"] and args[4] == f"--format={SACCT_FORMAT}"
    for snapshot in snapshots[1:]:
        (fake_bin / "sacct.out").write_text(snapshot)
        source.poll_once()
    assert source.mode == "sacct" and source.polls == len(snapshots)
    ended = [e.job_id for e in got if e.kind == EventKind.JOB_FINISHED]
    # Each job's end once (the stand-in prints every user's jobs, as `sacct -a` would).
    assert sorted(ended) == sorted(
        ["1", "2", "3_0", "3_1", "3_2", "3_3", "4", "8", "9", "10", "11"]
    )
    assert all(e.at != NOW for e in got)  # every time is one the rows state


def test_squeue_when_sacct_fails(fake_bin: Path) -> None:
    snapshots = _snapshots("squeue/G03_local_squeue_O_pipe_appended.txt", "JOBID|")
    got: list[Event] = []
    source = SlurmSource(got.append, user="alice", tz=UTC, clock=lambda: NOW)
    for snapshot in snapshots:
        (fake_bin / "squeue.out").write_text(snapshot)
        source.poll_once()
    assert source.mode == "squeue" and source.errors == 0
    assert f"--me -O {SQUEUE_FORMAT}" in (fake_bin / "squeue.args").read_text()
    ended = {e.job_id for e in got if e.kind == EventKind.JOB_FINISHED}
    assert {"2", "4", "8", "9"} <= ended


def test_no_slurm_no_events_and_the_config(fake_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = SlurmSource(lambda e: None, user="alice", interval_s=0.01, give_up_after=3)
    assert source.poll_once() == [] and source.errors == 1  # both exit 1
    source.start()  # `poll: auto` stops trying after three failed polls in a row
    assert source._thread is not None
    source._thread.join(10)
    assert not source._thread.is_alive() and source.failed_in_a_row == 3
    assert SlurmConfig(poll="on").wanted() and not SlurmConfig(poll="off").wanted()
    assert SlurmConfig().wanted()  # auto: the stand-ins are on PATH
    monkeypatch.setenv("PATH", str(fake_bin / "nothing-here"))
    assert not SlurmConfig().wanted()


def test_each_poll_reports_the_jobs_still_alive(fake_bin: Path) -> None:
    rows = [
        "JobIDRaw|JobID|User|JobName|Partition|State|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES",
        "101|101|alice|a|gpu|RUNNING|||||gres/gpu=1|",
        "102|102+0|alice|b|gpu|RUNNING|||||gres/gpu=1|",
        "103|102+1|alice|b|gpu|PENDING|||||gres/gpu=2|",
        "104|104|alice|c|gpu|COMPLETED|||||gres/gpu=1|",
        "105|105.batch|alice|d|gpu|RUNNING||||||",
        "106|106_[0-3]|alice|e|gpu|PENDING||||||",
        "107|107_2|alice|f|gpu|CANCELLED by 1000||||||",
    ]
    (fake_bin / "sacct.out").write_text("\n".join(rows) + "\n")
    seen: list[list[str]] = []
    source = SlurmSource(
        lambda e: None, user="alice", tz=UTC, clock=lambda: NOW, on_alive=seen.append
    )
    source.poll_once()
    # Finished jobs, steps and a pending array's placeholder are not jobs alive.
    assert seen == [["101", "102"]]
    (fake_bin / "sacct.out").write_text("\n".join(rows[:1] + rows[4:]) + "\n")
    source.poll_once()
    assert seen[-1] == []


def test_squeue_names_array_tasks_as_sacct_does(fake_bin: Path) -> None:
    """Real `squeue -O` output of the fixed format: array tasks are `1_0`..`1_3` (their raw
    ids 4, 5, 6 and 1 are never job ids), the pending `1_[0-3]` is no job, and the het job's
    two components are one job `2`."""
    text = (DATA / "squeue_array_O.txt").read_text()
    header = text.splitlines(keepends=True)[0]
    snapshots = [header + s for s in text.split(header) if s] + [header]
    got: list[Event] = []
    alive: list[list[str]] = []
    source = SlurmSource(got.append, user="alice", tz=UTC, clock=lambda: NOW, on_alive=alive.append)
    for snapshot in snapshots:
        (fake_bin / "squeue.out").write_text(snapshot)
        source.poll_once()
    assert source.mode == "squeue"
    assert {e.job_id for e in got} == {"1_0", "1_1", "1_2", "1_3", "2"}
    started = [e.job_id for e in got if e.kind == EventKind.JOB_STARTED]
    assert sorted(started) == ["1_0", "1_2", "1_3"]  # 1_1 was already running at the baseline
    # The pending array's row ends when its tasks start: that is no job's end.
    ended = sorted(e.job_id for e in got if e.kind == EventKind.JOB_FINISHED)
    assert ended == ["1_0", "1_1", "1_2", "1_3", "2"]
    assert all(e.gpus == 2 for e in got if e.job_id.startswith("1_"))
    assert alive[0] == ["2"] and alive[1] == ["1_0", "1_1", "2"] and alive[-1] == []
    assert alive[3] == ["1_1", "1_3", "2"]


def test_sacct_and_squeue_give_a_task_the_same_id() -> None:
    """The same cluster state as sacct -X (`JobID` column) and as the squeue source's format."""
    sacct_rows = [
        "JobIDRaw|JobID|User|JobName|Partition|State|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES",
        "5|1_1|alice|sweep|gpu|RUNNING|2026-11-27T06:22:19|2026-11-27T06:22:20|Unknown|6|"
        "gres/gpu=2|gres/gpu=2",
        "1|1_3|alice|sweep|gpu|PENDING|2026-11-27T06:22:19|Unknown|Unknown|0||gres/gpu=2",
        "6|1_2|alice|sweep|gpu|RUNNING|2026-11-27T06:22:19|2026-11-27T06:22:26|Unknown|0|"
        "gres/gpu=2|gres/gpu=2",
        "2|2+0|alice|het|gpu|PENDING|2026-11-27T06:22:19|Unknown|Unknown|0||gres/gpu=1",
        "3|2+1|alice|het|gpu|PENDING|2026-11-27T06:22:19|Unknown|Unknown|0||gres/gpu=1",
    ]
    third = (DATA / "squeue_array_O.txt").read_text().split("ARRAY_JOB_ID")[3]
    squeue_text = "ARRAY_JOB_ID" + third
    assert alive_jobs("\n".join(sacct_rows), "sacct") == alive_jobs(squeue_text, "squeue")
    assert alive_jobs(squeue_text, "squeue") == ["1_1", "1_2", "1_3", "2"]
