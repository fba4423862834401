"""`jitgpu demo --slurm`: one job on a power-saving Slurm node, reactive and then pre-warmed.

Starts a throwaway Slurm cluster on loopback (local_cluster), a control plane (`jitgpu
server`, SQLite) and the bridge, then submits the same plain `sbatch --gres=gpu:1` twice:
first as Slurm alone serves it (the powered-down node boots for the job), then after a hold
for the job's expected start, which the bridge turns into a power-up and a reservation.
"""

from __future__ import annotations

import getpass
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from control_plane.slurm_bridge.config import BridgeConfig, SlurmAccount
from control_plane.slurm_bridge.local_cluster import ALWAYS_ON, CLOUD, SlurmCluster
from control_plane.slurm_bridge.local_files import SlurmUnavailable, missing_binaries
from control_plane.slurm_bridge.main import run_bridge

JITGPU = [sys.executable, "-m", "smart_agent.cli.main"]


def say(text: str) -> None:
    print(f"[slurm-demo] {text}", flush=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def _job_start(cluster: SlurmCluster, job: str, timeout: float) -> float:
    began = time.monotonic()
    _wait(lambda: cluster.job_field(job, "JobState") == "RUNNING", timeout, f"job {job}")
    return time.monotonic() - began


def run_slurm_demo(*, boot_s: float = 10.0) -> int:
    missing = missing_binaries()
    if missing:
        say(f"Slurm is not installed (missing {', '.join(missing)}); Debian: "
            "apt-get install slurm-wlm munge")  # fmt: skip
        return 2
    folder = Path(tempfile.mkdtemp(prefix="jitgpu-slurm-demo-"))
    admin_token = secrets.token_urlsafe(24)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cluster = SlurmCluster(boot_delay_s=boot_s, suspend_time_s=5)
    server: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    bridge_thread: threading.Thread | None = None
    ok = False
    try:
        cluster.start()
        say(f"Slurm up: {ALWAYS_ON} always on, {CLOUD} powered down (boots in {boot_s:.0f}s)")
        with open(folder / "server.log", "wb") as log:
            server = subprocess.Popen(
                [*JITGPU, "server", "--port", str(port),
                 "--database-url", f"sqlite:///{folder / 'jitgpu.db'}"],
                env={**os.environ, "JITGPU_ADMIN_TOKEN": admin_token,
                     "JITGPU_JOBS_INTERVAL_S": "1", "JITGPU_LOG_FORMAT": "text"},
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 60, "server")
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_token}"})
        tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        # One enrolment token per Slurm node: each node gets its own credential.
        enrol = {
            name: admin.post("/v1/node-tokens", json={"node_name": name}).json()["key"]
            for name in (ALWAYS_ON, CLOUD)
        }
        alice = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"})
        say(f"control plane on {url}; tenant alice is Slurm user {getpass.getuser()}")
        cfg = BridgeConfig(
            server=url,
            enrol_tokens=enrol,
            slurm_conf=cluster.layout.conf,
            poll_s=0.5,
            resume_latency_s=boot_s + 2,
            tenants={"alice": SlurmAccount(users=getpass.getuser())},
        )
        logging.basicConfig(level=logging.INFO, format="[bridge    ] %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)
        bridge_thread = threading.Thread(target=run_bridge, args=(cfg,), kwargs={"stop": stop})
        bridge_thread.start()
        cluster.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 3600")
        say(f"{ALWAYS_ON} is busy with another job: the next GPU job needs {CLOUD}")

        say("1) reactive: sbatch --gres=gpu:1 with the node powered down")
        job = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 3")
        reactive = _job_start(cluster, job, 120)
        say(f"   job {job} started after {reactive:.1f}s (the node booted for it)")
        _wait(lambda: "POWERED_DOWN" in cluster.node_state(CLOUD), 120, "power-down")
        say(f"   {CLOUD} idle again and powered down by Slurm's SuspendTime")

        lead = boot_s + 4
        say(f"2) jitgpu: the agent forecasts the same job in {lead:.0f}s and holds GPUs")
        hold = alice.post(
            "/v1/holds",
            json={"gpu_count": 2, "ttl_s": 300, "start_in_s": lead, "lead_s": int(lead) + 1,
                  "warmup": "boot"},
        ).json()  # fmt: skip
        time.sleep(lead)
        job = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 3")
        warm = _job_start(cluster, job, 120)
        say(f"   job {job} (plain sbatch) landed in reservation "
            f"{cluster.job_field(job, 'Reservation')} and started after {warm:.1f}s")  # fmt: skip
        _wait(lambda: alice.get(f"/v1/holds/{hold['id']}").json()["status"] == "claimed", 30,
              "claim")  # fmt: skip
        got = alice.get(f"/v1/holds/{hold['id']}").json()
        alloc = alice.get(f"/v1/allocations/{got['allocation_id']}").json()
        say(f"   hold {hold['id']} claimed: time-to-GPU {alloc['time_to_gpu_s']}s by Slurm's "
            f"clock (reactive: {reactive:.0f}s)")  # fmt: skip
        ok = True
        return 0
    except (SlurmUnavailable, TimeoutError, httpx.HTTPError) as exc:
        say(f"error: {exc}; logs in {folder}")
        return 1
    finally:
        stop.set()
        if bridge_thread is not None:
            bridge_thread.join(timeout=10)
        cluster.stop()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        if ok:
            shutil.rmtree(folder, ignore_errors=True)
