"""The harness itself: a real slurmctld with an always-on node and a power-saving cloud node."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.procs import wait_for
from tests.support.slurm_cluster import ALWAYS_ON, CLOUD, SlurmCluster

pytestmark = pytest.mark.slurm


def test_nodes_fake_gpus_and_cloud_node_starts_powered_down(slurm: SlurmCluster) -> None:
    out = slurm.run("sinfo", "-h", "-N", "-o", "%N|%T|%G").stdout.split()
    assert sorted(out) == [f"{CLOUD}|idle~|gpu:2", f"{ALWAYS_ON}|idle|gpu:2"]


def test_magnetic_reservation_captures_plain_sbatch_after_power_up(slurm: SlurmCluster) -> None:
    busy = slurm.sbatch("--gres=gpu:2", "--wrap=sleep 60", "-w", ALWAYS_ON)
    slurm.scontrol(
        "create", "reservation", "ReservationName=jitgpu-t1", "StartTime=now",
        "Duration=00:05:00", f"Nodes={CLOUD}", "Users=root", "Flags=MAGNETIC",
    )  # fmt: skip
    began = time.monotonic()
    slurm.scontrol("update", f"nodename={CLOUD}", "state=power_up")
    wait_for(lambda: slurm.node_state(CLOUD) == "IDLE+CLOUD+RESERVED" or None, timeout=30,
             what="cloud1 booted", interval=0.2)  # fmt: skip
    # The resume program ran with the boot delay; Slurm handed it the nodes as JSON.
    assert time.monotonic() - began >= slurm.layout.boot_delay_s
    lines = slurm.layout.resume_log.read_text().splitlines()
    assert lines[0].split()[1] == CLOUD
    assert json.loads(lines[1])["all_nodes"] == CLOUD
    job = slurm.sbatch("--gres=gpu:1", "--wrap=sleep 30")  # names no reservation
    wait_for(lambda: slurm.job_field(job, "JobState") == "RUNNING" or None, timeout=20,
             what="job running", interval=0.2)  # fmt: skip
    assert slurm.job_field(job, "Reservation") == "jitgpu-t1"
    assert slurm.job_field(job, "NodeList") == CLOUD
    slurm.run("scancel", job, busy)
