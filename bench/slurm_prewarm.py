"""Slurm power saving, reactive against jitgpu pre-warm: time-to-start and idle node-seconds.

    .venv/bin/python bench/slurm_prewarm.py --jobs 3 --boot 10

A throwaway Slurm cluster on loopback (control_plane/slurm_bridge/local_cluster.py): an always-on
node kept busy, and a power-saving cloud node whose resume program boots it in `--boot` seconds. The
same job sequence runs twice, each job after the cloud node has suspended again:

- reactive: the researcher's `sbatch --gres=gpu:1` wakes the node; it waits for the boot.
- jitgpu: a hold for the job's expected start (as the agent would forecast it); the bridge
  powers the node up one measured resume latency early and reserves it; the same plain sbatch,
  at the forecast time, lands in the reservation.

Time-to-start is from the sbatch call to the job seen RUNNING (polled every 0.1 s) and, as
Slurm records it, StartTime - SubmitTime (whole seconds). Idle node-seconds: the cloud node
powered (booting or up) with no job on it, sampled every 0.1 s, until it is powered down again.
"""

from __future__ import annotations

import argparse
import getpass
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient
from machine import describe

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.jobs.registry import run_all
from control_plane.slurm_bridge.bridge import Bridge, BridgeClient
from control_plane.slurm_bridge.config import BridgeConfig, SlurmAccount
from control_plane.slurm_bridge.slurm import Slurm
from tests.support.slurm_cluster import ALWAYS_ON, CLOUD, SlurmCluster

ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class Sampler:
    """Idle node-seconds of the cloud node: powered (booting or up) while no job runs on it."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.idle_s = 0.0
        self.last = time.monotonic()

    def sample(self) -> str:
        now = time.monotonic()
        state = self.cluster.node_state(CLOUD)
        flags = set(state.split("+"))
        powered = not flags & {"POWERED_DOWN", "POWER_DOWN"}
        busy = bool(flags & {"ALLOCATED", "MIXED", "COMPLETING"})
        if powered and not busy:
            self.idle_s += now - self.last
        self.last = now
        return state


def wait_running(cluster: SlurmCluster, job: str, tick) -> float:  # type: ignore[no-untyped-def]
    while cluster.job_field(job, "JobState") != "RUNNING":
        tick()
        time.sleep(0.1)
    return time.monotonic()


def slurm_wait_s(cluster: SlurmCluster, job: str) -> float:
    submit = datetime.fromisoformat(cluster.job_field(job, "SubmitTime"))
    start = datetime.fromisoformat(cluster.job_field(job, "StartTime"))
    return (start - submit).total_seconds()


def until_powered_down(cluster: SlurmCluster, sampler: Sampler, tick) -> None:  # type: ignore[no-untyped-def]
    while "POWERED_DOWN" not in sampler.sample():
        tick()
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--boot", type=float, default=10.0, help="cloud node boot seconds")
    parser.add_argument("--job-s", type=float, default=3.0, help="each job's run time")
    parser.add_argument("--suspend-time", type=int, default=5, help="Slurm SuspendTime")
    args = parser.parse_args()
    cluster = SlurmCluster(boot_delay_s=args.boot, suspend_time_s=args.suspend_time).start()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-bench-"))
    db = Database(f"sqlite:///{tmp / 'jitgpu.db'}")
    try:
        upgrade(db)
        settings = ServerSettings(database_url=str(db.url), admin_token=ADMIN_TOKEN, run_jobs=False)
        app = create_app(settings, db=db, clock=time.time, key_cache_ttl_s=0)
        with TestClient(app) as http:
            tid = http.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}, headers=ADMIN)
            key = http.post(f"/v1/tenants/{tid.json()['id']}/api-keys", headers=ADMIN).json()
            tenant = {"Authorization": f"Bearer {key['key']}"}
            enrol = {
                name: http.post("/v1/node-tokens", json={"node_name": name}, headers=ADMIN).json()[
                    "key"
                ]
                for name in (ALWAYS_ON, CLOUD)
            }
            cfg = BridgeConfig(
                enrol_tokens=enrol,
                poll_s=0.3,
                resume_latency_s=args.boot + 2,  # a first guess; the bridge measures it
                tenants={"alice": SlurmAccount(users=getpass.getuser())},
            )
            bridge = Bridge(cfg, Slurm(env=cluster.env), BridgeClient("http://x", "", http=http))

            def tick() -> None:
                now = time.time()
                run_all(db, settings, now)
                bridge.step(now)

            # The always-on node is busy all along: every job of the sequence needs cloud1.
            cluster.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 3600")
            tick()
            results: dict[str, dict[str, list[float]]] = {}
            for mode in ("reactive", "jitgpu"):
                res = results.setdefault(mode, {"ttg": [], "slurm": [], "idle": []})
                for _ in range(args.jobs):
                    sampler = Sampler(cluster)
                    until_powered_down(cluster, sampler, tick)
                    sampler = Sampler(cluster)
                    if mode == "jitgpu":
                        lead = bridge.resume_latency_s + 3
                        start = time.time() + lead
                        r = http.post(
                            "/v1/holds",
                            json={"gpu_count": 2, "ttl_s": 120, "start_in_s": lead,
                                  "lead_s": int(lead) + 1, "warmup": "boot"},
                            headers=tenant,
                        )  # fmt: skip
                        assert r.status_code == 201, r.text
                        while time.time() < start:
                            tick()
                            sampler.sample()
                            time.sleep(0.1)
                    began = time.monotonic()
                    job = cluster.sbatch("--gres=gpu:1", f"--wrap=sleep {args.job_s}")
                    ran = wait_running(cluster, job, lambda s=sampler: (tick(), s.sample()))
                    res["ttg"].append(ran - began)
                    res["slurm"].append(slurm_wait_s(cluster, job))
                    while cluster.job_field(job, "JobState") in ("RUNNING", "COMPLETING"):
                        tick()
                        sampler.sample()
                        time.sleep(0.1)
                    until_powered_down(cluster, sampler, tick)
                    res["idle"].append(sampler.idle_s)
                    ttg, waited, idle = res["ttg"][-1], res["slurm"][-1], res["idle"][-1]
                    print(f"{mode}: job {job} time-to-start {ttg:.1f}s (Slurm {waited:.0f}s), "
                          f"idle node-s {idle:.1f}")  # fmt: skip
    finally:
        cluster.stop()
        db.dispose()
        shutil.rmtree(tmp, ignore_errors=True)
    print(describe())
    print(f"{args.jobs} jobs per mode, boot {args.boot:.0f}s, SuspendTime {args.suspend_time}s")
    print(
        "| mode | time-to-start median (s) | Slurm Start-Submit median (s) | idle node-s median |"
    )
    print("|---|---|---|---|")
    for mode, res in results.items():
        ttg, waited, idle = (statistics.median(res[k]) for k in ("ttg", "slurm", "idle"))
        print(f"| {mode} | {ttg:.1f} | {waited:.0f} | {idle:.1f} |")


if __name__ == "__main__":
    main()
