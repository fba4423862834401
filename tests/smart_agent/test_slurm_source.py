"""The Slurm source runs sacct (or squeue when sacct fails) with a fixed format, as real
processes (stand-in commands on PATH print the real samples' snapshots); the first poll is
a baseline, later polls report what changed, at the times the rows state."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from predictors.types import Event, EventKind
from smart_agent.slurm_source import SACCT_FORMAT, SlurmConfig, SlurmSource

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"
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
    assert "--me -O JobID:|" in (fake_bin / "squeue.args").read_text()
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
