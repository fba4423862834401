"""2,000 one-GPU `true` jobs on 8 GPUs, through jitgpu and through Slurm, in the same run.

    .venv/bin/python bench/vs_slurm.py                 # --jobs 2000 --gpus 8 --quota 8
    .venv/bin/python bench/vs_slurm.py --no-slurm      # the jitgpu half only (quick checks)

jitgpu: one `jitgpu server` (SQLite, defaults) and one `jitgpu node` with 8 simulated GPUs
and the default 5 s heartbeat (work reaches it by its long poll); a tenant with a quota of 8,
so the queue holds the rest. The jobs are submitted as fast as the server accepts them (16
concurrent clients), each `POST /v1/allocations {"gpu_count": 1, "command": ["true"]}`.
Figures: submit rate, completed jobs/s (jobs / first submission to last release), and
allocation-to-task-start (the server's `allocated_at` to the agent's "task started" log line).

Slurm: runs only where `slurmctld`, `slurmd`, `sbatch`, `squeue`, `sinfo` and `munged` are
installed (Debian packages `slurm-wlm` and `munge`); this script installs nothing. Run it as
root (slurmd wants character devices for the GPUs: it makes stand-ins that behave as
/dev/null). It starts its own `munged` (a fresh key, a private socket), one `slurmctld` and
one `slurmd` on loopback, one node with `gpu:8` and 8 CPUs, and submits with `sbatch
--gres=gpu:1 --wrap true` from 16 threads. The tuned configuration is `SLURM_TUNED` below:
backfill, scheduling on every submission and every job end without batching delays
(`sched_min_interval=0`, `batch_sched_delay=0`), a deep queue per pass, finished jobs purged
after 2 s, no accounting (without slurmdbd there are no association limits: the 8 GPUs
themselves are the limit of 8).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import re
import shutil
import socket
import sqlite3
import stat
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import httpx
import psutil
import yaml
from machine import describe

from tests.support.procs import JITGPU, Proc, ServerProc, free_port, wait_for

ADMIN = "bench-admin-token-0123456789"
CLIENTS = 16
STARTED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO \S+: allocation (alloc_[0-9a-f]+): "
    r"task started"
)
FINAL = ("released", "expired", "lost", "cancelled")


# --- jitgpu --------------------------------------------------------------------------------
async def _submit(url: str, key: str, jobs: int) -> float:
    """Submit `jobs` allocations from CLIENTS concurrent clients; seconds it took."""
    body = {"gpu_count": 1, "command": ["true"], "use_holds": False}
    left = iter(range(jobs))
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60, limits=limits
    ) as http:

        async def client() -> None:
            for _ in left:
                r = await http.post("/v1/allocations", json=body)
                if r.status_code not in (201, 202):
                    raise SystemExit(f"submission refused: {r.status_code} {r.text}")

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        return time.monotonic() - started


def _task_starts(log: Path) -> dict[str, float]:
    starts = {}
    for line in log.read_text(errors="replace").splitlines():
        m = STARTED.match(line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
            starts[m.group(3)] = stamp + int(m.group(2)) / 1000
    return starts


def run_jitgpu(args: argparse.Namespace, tmp: Path) -> dict:
    db_path = tmp / "jitgpu.db"
    env = {"JITGPU_LOG_LEVEL": "warning"}
    server = ServerProc(tmp, database_url=f"sqlite:///{db_path}", admin_token=ADMIN, env=env)
    procs: list[Proc] = [server.start()]
    try:
        server.wait_ready()
        with server.admin() as admin:
            # An enrolment token for node n1: the agent trades it for its own credential.
            body = {"node_name": "n1"}
            token = admin.post("/v1/node-tokens", json=body).json()["key"]
            body = {"name": "bench", "quota_gpus": args.quota}
            tenant = admin.post("/v1/tenants", json=body).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            config = tmp / "node.yaml"
            # Defaults (5 s heartbeat, long poll on) but for the cache folder.
            config.write_text(yaml.safe_dump({"cache_dir": str(tmp / "node-cache")}))
            node_log = tmp / "node.log"
            node = Proc(
                [
                    *JITGPU,
                    "node",
                    "--server",
                    server.url,
                    "--enrol-token",
                    token,
                    "--name",
                    "n1",
                    "--simulated-gpus",
                    str(args.gpus),
                    "--config",
                    str(config),
                ],
                log=node_log,
            )
            procs.append(node.start())
            wait_for(
                lambda: any(n["status"] == "online" for n in admin.get("/v1/nodes").json()),
                timeout=60,
                what="the node online",
            )
        watched = [psutil.Process(p.pid) for p in procs]
        cpu_before = [_cpu(p) for p in watched]
        started = time.monotonic()
        submit_s = asyncio.run(_submit(server.url, key, args.jobs))
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:

            def done() -> bool:
                marks = ",".join("?" * len(FINAL))
                sql = f"SELECT count(*) FROM allocation WHERE status IN ({marks})"
                return conn.execute(sql, FINAL).fetchone()[0] >= args.jobs

            wait_for(done, timeout=args.timeout, what="all jobs to finish", interval=0.2)
            elapsed = time.monotonic() - started
            # Where the time went: each process's CPU over the whole run (100% = one core).
            used = [_cpu(p) - b for p, b in zip(watched, cpu_before, strict=True)]
            cpu_pct = [100 * u / elapsed for u in used]
            rows = conn.execute(
                "SELECT id, requested_at, allocated_at, released_at, task_status FROM allocation"
            ).fetchall()
    finally:
        for proc in reversed(procs):
            proc.stop()
    starts = _task_starts(node_log)
    delays = [starts[i] - alloc for i, _, alloc, _, _ in rows if i in starts and alloc]
    first = min(r[1] for r in rows)
    last = max(r[3] for r in rows if r[3] is not None)
    return {
        "jobs": len(rows),
        "exited": sum(1 for r in rows if r[4] == "exited"),
        "submit_per_s": args.jobs / submit_s,
        "completed_per_s": len(rows) / (last - first),
        "start_p50_ms": 1000 * statistics.median(delays) if delays else float("nan"),
        "start_p90_ms": 1000 * statistics.quantiles(delays, n=10)[-1] if delays else float("nan"),
        "starts_seen": len(delays),
        "server_cpu_pct": cpu_pct[0],
        "node_cpu_pct": cpu_pct[1],
    }


def _cpu(proc: psutil.Process) -> float:
    """CPU seconds of a process and its children (the node agent's tasks included)."""
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


# --- Slurm ---------------------------------------------------------------------------------
SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "munged")

SLURM_TUNED = """\
ClusterName=bench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={tmp}/munge.sock
CryptoType=crypto/munge
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
SlurmctldDebug=error
SlurmdDebug=error
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,default_queue_depth=2000,\
partition_job_depth=2000,sched_max_job_start=0,bf_interval=1,max_rpc_cnt=0
MinJobAge=2
KillWait=1
InactiveLimit=0
MessageTimeout=10
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName=bench1 NodeHostname={host} NodeAddr=127.0.0.1 Port={slurmd_port} CPUs={cpus} \
RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=bench Nodes=bench1 Default=YES MaxTime=INFINITE State=UP
"""


def slurm_missing() -> list[str]:
    return [b for b in SLURM_BINARIES if shutil.which(b) is None]


def _start_munged(tmp: Path, logs: BinaryIO) -> subprocess.Popen[bytes]:
    """A private munged (own key and socket): the machine's own munge is not needed."""
    key = tmp / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    args = [
        "munged",
        "-F",
        "-f",
        f"--socket={tmp / 'munge.sock'}",
        f"--key-file={key}",
        f"--pid-file={tmp / 'munged.pid'}",
        f"--log-file={tmp / 'munged.log'}",
        f"--seed-file={tmp / 'munge.seed'}",
        "--num-threads=2",
    ]
    proc = subprocess.Popen(args, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: (tmp / "munge.sock").exists(), timeout=20, what="munged")
    return proc


def run_slurm(args: argparse.Namespace, tmp: Path) -> dict:
    for folder in ("state", "spool", "dev"):
        (tmp / folder).mkdir()
    # Stand-ins for the GPUs' device files: slurmd wants character devices (here ones that
    # behave as /dev/null); making them needs root, as running slurmd does.
    for i in range(args.gpus):
        os.mknod(tmp / "dev" / f"nvidia{i}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    conf = tmp / "slurm.conf"
    conf.write_text(
        SLURM_TUNED.format(
            host=socket.gethostname().split(".")[0],
            user=getpass.getuser(),
            ctld_port=free_port(),
            slurmd_port=free_port(),
            tmp=tmp,
            cpus=args.gpus,  # one core per job: all 8 GPUs' jobs can run at once
            gpus=args.gpus,
        )
    )
    (tmp / "gres.conf").write_text(
        f"AutoDetect=off\nName=gpu File={tmp}/dev/nvidia[0-{args.gpus - 1}]\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = (tmp / "daemons.log").open("ab")
    daemons = [_start_munged(tmp, logs)]
    try:
        for cmd in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", "bench1"]):
            daemons.append(
                subprocess.Popen(
                    cmd, env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

        def idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True
            )
            return out.returncode == 0 and "idle" in out.stdout

        try:
            wait_for(idle, timeout=60, what="slurmd idle")
        except TimeoutError:
            for name in ("slurmctld.log", "slurmd.log", "daemons.log"):
                path = tmp / name
                if path.exists():
                    print(f"--- {name}:\n{path.read_text(errors='replace')[-2000:]}")
            raise

        def submit(_: int) -> None:
            cmd = ["sbatch", "--parsable", "--gres=gpu:1", "-n1", "-o", "/dev/null"]
            subprocess.run([*cmd, "--wrap", "true"], env=env, check=True, capture_output=True)

        started = time.monotonic()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(submit, range(args.jobs)))
        submit_s = time.monotonic() - started

        def empty() -> bool:
            out = subprocess.run(
                ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=True
            )
            return not out.stdout.strip()

        wait_for(empty, timeout=args.timeout, what="all Slurm jobs to finish", interval=0.2)
        total_s = time.monotonic() - started
    finally:
        for d in reversed(daemons):
            d.terminate()
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait(timeout=5)
        logs.close()
    return {"submit_per_s": args.jobs / submit_s, "completed_per_s": args.jobs / total_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--quota", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--no-slurm",
        action="store_true",
        help="run the jitgpu half only (quick checks; the comparison needs both halves)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jitgpu-vs-slurm-"))
    try:
        (tmp / "jitgpu").mkdir()
        j = run_jitgpu(args, tmp / "jitgpu")
        print(f"machine: {describe()}")
        print(
            f"jitgpu: {args.jobs} one-GPU `true` jobs on {args.gpus} simulated GPUs, quota "
            f"{args.quota}: submitted at {j['submit_per_s']:.0f}/s, completed "
            f"{j['completed_per_s']:.1f} jobs/s ({j['exited']} exited 0), allocation to task "
            f"start p50 {j['start_p50_ms']:.1f} ms, p90 {j['start_p90_ms']:.1f} ms "
            f"({j['starts_seen']} starts); CPU over the run: server {j['server_cpu_pct']:.0f}%, "
            f"node agent with its tasks {j['node_cpu_pct']:.0f}% of a core"
        )
        if args.no_slurm:
            return
        missing = slurm_missing()
        if missing:
            print(
                f"slurm: skipped: {', '.join(missing)} not found (install the Debian packages "
                "slurm-wlm and munge to compare in the same run)"
            )
            return
        (tmp / "slurm").mkdir()
        s = run_slurm(args, tmp / "slurm")
        print(
            f"slurm (tuned, see SLURM_TUNED): submitted at {s['submit_per_s']:.0f}/s, "
            f"completed {s['completed_per_s']:.1f} jobs/s; jitgpu/slurm completed: "
            f"{j['completed_per_s'] / s['completed_per_s']:.1f}x"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
