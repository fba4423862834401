"""Config files and scripts of a throwaway Slurm cluster on loopback (see local_cluster)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "scontrol", "sbatch", "squeue", "sinfo")


class SlurmUnavailable(RuntimeError):
    pass


def find_binary(name: str) -> str | None:
    # Debian puts the daemons in /usr/sbin, which a non-login PATH may lack.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")


def missing_binaries() -> list[str]:
    return [b for b in SLURM_BINARIES if find_binary(b) is None]


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass(frozen=True)
class Layout:
    """Where everything of one throwaway cluster lives, and the knobs tests choose."""

    root: Path
    ctld_port: int
    always_on_port: int
    cloud_port: int
    gpus_per_node: int = 2
    boot_delay_s: float = 3.0
    resume_timeout_s: int = 40
    suspend_time_s: int = 6
    # Accounting (slurmdbd and its MariaDB): off unless asked for, it costs seconds to start.
    accounting: bool = False
    dbd_port: int = 0
    db_port: int = 0
    db_password: str = ""

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def dbd_conf(self) -> Path:
        return self.root / "slurmdbd.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.sock"

    def pidfile(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    @property
    def stopping(self) -> Path:
        """Made by stop(): a boot still in its delay then starts no slurmd."""
        return self.root / "stopping"

    @property
    def boots(self) -> Path:
        """The pids of boots in progress (the resume program's delayed slurmd starts)."""
        return self.root / "boots.pid"

    @property
    def resume_log(self) -> Path:
        """One line per resume: `<epoch> <nodes>`, and the JSON Slurm passed (SLURM_RESUME_FILE)."""
        return self.root / "resume.log"


ALWAYS_ON = "gpu1"
CLOUD = "cloud1"


def write_files(layout: Layout) -> None:
    root = layout.root
    for sub in ("munge", "state", "dev", f"spool/{ALWAYS_ON}", f"spool/{CLOUD}"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    slurmd = find_binary("slurmd")
    scontrol = find_binary("scontrol")
    n = layout.gpus_per_node
    conf = f"""\
ClusterName=jitgpu
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={layout.ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
CryptoType=crypto/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={layout.pidfile("slurmctld")}
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={layout.log("slurmctld")}
SlurmdLogFile={root}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
{_accounting(layout)}JobCompType=jobcomp/none
MpiDefault=none
# A job that claimed a hold outlives its reservation (the bridge ends it early, at the claim).
ResvOverRun=UNLIMITED
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=5
TreeWidth=65533
ResumeProgram={root}/resume.sh
SuspendProgram={root}/suspend.sh
ResumeTimeout={layout.resume_timeout_s}
SuspendTimeout=5
SuspendTime={layout.suspend_time_s}
SuspendExcNodes={ALWAYS_ON}
ResumeRate=0
SuspendRate=0
PrivateData=cloud
NodeName={ALWAYS_ON} NodeHostname={host} NodeAddr=127.0.0.1 Port={layout.always_on_port} \
CPUs=2 RealMemory=1000 Gres=gpu:{n} State=UNKNOWN
NodeName={CLOUD} NodeHostname={host} NodeAddr=127.0.0.1 Port={layout.cloud_port} \
CPUs=2 RealMemory=1000 Gres=gpu:{n} State=CLOUD
PartitionName=gpu Nodes={ALWAYS_ON},{CLOUD} Default=YES MaxTime=INFINITE State=UP
"""
    layout.conf.write_text(conf)
    # Fake GPU devices: links to /dev/null stand in for /dev/nvidiaN (Slurm stats them).
    for i in range(n):
        (root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
    (root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={root}/dev/nvidia[0-{n - 1}]\n")
    # The resume program "boots" a cloud node: after a delay, start its slurmd. Slurm hands
    # it the nodes (a hostlist) and, in SLURM_RESUME_FILE, the job-to-node map as JSON.
    _script(
        root / "resume.sh",
        f"""#!/bin/sh
echo "$(date +%s.%N) $1" >> {layout.resume_log}
if [ -n "$SLURM_RESUME_FILE" ]; then
  cat "$SLURM_RESUME_FILE" >> {layout.resume_log}; echo >> {layout.resume_log}
fi
(
  sleep {layout.boot_delay_s}
  [ -e {layout.stopping} ] && exit 0
  for node in $(SLURM_CONF={layout.conf} {scontrol} show hostnames "$1"); do
    SLURM_CONF={layout.conf} {slurmd} -b -f {layout.conf} -N "$node"
  done
) >/dev/null 2>&1 &
echo $! >> {layout.boots}
""",
    )
    _script(
        root / "suspend.sh",
        f"""#!/bin/sh
for node in $(SLURM_CONF={layout.conf} {scontrol} show hostnames "$1"); do
  pid=$(cat {root}/slurmd-$node.pid 2>/dev/null) && kill "$pid"
done
exit 0
""",
    )


def _accounting(layout: Layout) -> str:
    if not layout.accounting:
        return (
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        )
    # The "password" is the munge socket clients (sacct, sacctmgr) reach slurmdbd through;
    # gres/gpu in the TRES: sacct's AllocTRES/ReqTRES then name each job's GPU count.
    return f"""\
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={layout.dbd_port}
AccountingStoragePass={layout.munge_socket}
AccountingStorageTRES=gres/gpu
"""


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def munge_key(layout: Layout) -> Path:
    key = layout.root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    layout.root.joinpath("munge").chmod(0o711)
    return key


def env(layout: Layout) -> dict[str, str]:
    """The environment every Slurm client command of this cluster runs with."""
    out = dict(os.environ)
    out["SLURM_CONF"] = str(layout.conf)
    out["PATH"] = out.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    return out
