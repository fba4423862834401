"""The Slurm source against a real slurmctld (no accounting, so it falls back to squeue): a
job array's tasks keep the ids sacct gives them, and its pending row is never a job."""

from __future__ import annotations

import getpass
import time
from collections.abc import Sequence

import pytest

from predictors.types import Event, EventKind
from smart_agent.slurm_source import SlurmSource
from tests.support.slurm_cluster import ALWAYS_ON, SlurmCluster

pytestmark = pytest.mark.slurm


def test_array_tasks_named_as_sacct_names_them(slurm: SlurmCluster) -> None:
    def run(argv: Sequence[str], timeout: float) -> str:
        return slurm.run(*argv).stdout  # raises on sacct: accounting storage is disabled

    got: list[Event] = []
    alive: list[list[str]] = []
    source = SlurmSource(got.append, user=getpass.getuser(), run=run, on_alive=alive.append)
    # Two GPUs per task and one node held to: the tasks run one after another, the rest wait
    # as one pending row `N_[1-3]` that shrinks as they start.
    array = slurm.sbatch("--array=0-3", "--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 2")
    source.poll_once()  # the baseline: the whole array pending
    deadline = time.monotonic() + 90
    while slurm.run("squeue", "-h").stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.5)  # the cluster runs on real time
        source.poll_once()
    source.poll_once()
    assert source.mode == "squeue" and alive[0] == [] and alive[-1] == []
    tasks = {f"{array}_{i}" for i in range(4)}
    assert any(alive) and all(set(ids) <= tasks for ids in alive)
    # Each task starts and ends once under its own id; the pending row ends as no job.
    started = sorted(e.job_id for e in got if e.kind == EventKind.JOB_STARTED)
    ended = sorted(e.job_id for e in got if e.kind == EventKind.JOB_FINISHED)
    assert started == ended == sorted(tasks), [(e.kind.value, e.job_id) for e in got]
    assert {e.job_id for e in got} == tasks and all(e.gpus == 2 for e in got)
