"""Slurm as the bridge sees it: nodes, jobs and reservations through scontrol/squeue (22.05+).

Only the client commands are used, with machine-readable output (`-o` one-line records,
`squeue -o` with a separator), so the bridge needs no Slurm library and no root: an
operator account (`AdminLevel=Operator`) may create and delete reservations and power nodes.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

# `Key=value` pairs of `scontrol show ... -o`; a value may hold spaces (OS=Linux 6.1 ...), so a
# value runs up to the next ` Key=`.
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_/:.]*=|\s*$)")
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")

# A node in these states does not run jobs now; POWERED_DOWN / POWERING_UP mean power saving.
_DOWN = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "INVAL")


class SlurmError(RuntimeError):
    pass


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # e.g. IDLE+CLOUD+POWERED_DOWN
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]

    @property
    def flags(self) -> set[str]:
        return set(self.state.split("+"))

    @property
    def powered_down(self) -> bool:
        return bool(self.flags & {"POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN"})

    @property
    def powering_up(self) -> bool:
        return bool(self.flags & {"POWERING_UP", "POWER_UP"})

    @property
    def usable(self) -> bool:
        """Booted and able to run a job now."""
        return not (self.powered_down or self.powering_up or self.flags & set(_DOWN))

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"DOWN", "FAIL"}) and not self.powering_up


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str
    state: str
    nodes: str
    submitted_at: datetime | None
    started_at: datetime | None
    reservation: str | None


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: str
    users: str
    end: datetime | None


def parse_pairs(line: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _PAIR.finditer(line)}


def gpu_count(gres: str) -> int:
    """GPUs in a Gres string such as `gpu:2`, `gpu:a100:4(S:0-1)` or `gpu:2,shard:8`."""
    return sum(int(n) for n in _GPU_GRES.findall(gres or ""))


def slurm_time(text: str) -> datetime | None:
    """Slurm prints times in the controller's local zone without an offset."""
    if not text or text in ("N/A", "None", "Unknown", "(null)"):
        return None
    try:
        return datetime.fromisoformat(text).astimezone()
    except ValueError:
        return None


def format_time(when: datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


class Slurm:
    """Runs the Slurm client commands; `env` carries SLURM_CONF for a given cluster."""

    def __init__(self, *, env: dict[str, str] | None = None, timeout_s: float = 20.0) -> None:
        self.env = env
        self.timeout_s = timeout_s

    def run(self, *args: str) -> str:
        try:
            done = subprocess.run(
                list(args), env=self.env, capture_output=True, text=True, timeout=self.timeout_s
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{args[0]}: {exc}") from exc
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(args[:3])}: {(done.stderr or done.stdout).strip()}")
        return done.stdout

    # -- reading --------------------------------------------------------------------------

    def nodes(self) -> list[SlurmNode]:
        out = []
        for line in self.run("scontrol", "-d", "-o", "show", "node").splitlines():
            f = parse_pairs(line)
            if "NodeName" not in f:
                continue
            out.append(
                SlurmNode(
                    name=f["NodeName"],
                    state=f.get("State", ""),
                    gpus=gpu_count(f.get("Gres", "")),
                    gpus_used=gpu_count(f.get("GresUsed", "")),
                    partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
                )
            )
        return out

    def jobs(self) -> list[SlurmJob]:
        fmt = "%i|%u|%T|%N|%V|%S|%v"
        out = []
        for line in self.run("squeue", "-h", "-a", "-o", fmt).splitlines():
            parts = line.split("|")
            if len(parts) != 7:
                continue
            job_id, user, state, nodes, submit, start, resv = parts
            out.append(
                SlurmJob(
                    job_id=job_id,
                    user=user,
                    state=state,
                    nodes=nodes,
                    submitted_at=slurm_time(submit),
                    started_at=slurm_time(start) if state == "RUNNING" else None,
                    reservation=None if resv in ("", "(null)") else resv,
                )
            )
        return out

    def reservations(self, prefix: str) -> dict[str, Reservation]:
        text = self.run("scontrol", "show", "reservation", "-o")
        out = {}
        for line in text.splitlines():
            f = parse_pairs(line)
            name = f.get("ReservationName", "")
            if name.startswith(prefix):
                out[name] = Reservation(
                    name=name,
                    nodes=f.get("Nodes", ""),
                    users=f.get("Users", ""),
                    end=slurm_time(f.get("EndTime", "")),
                )
        return out

    # -- acting ---------------------------------------------------------------------------

    def create_reservation(
        self,
        name: str,
        *,
        nodes: Sequence[str],
        end: datetime,
        users: str | None,
        accounts: str | None,
    ) -> None:
        # MAGNETIC: the tenant's plain sbatch lands in it without naming it. IGNORE_JOBS: a
        # node whose other GPUs run a job can still be reserved (the job keeps running).
        args = [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            "StartTime=now",
            f"EndTime={format_time(end)}",
            f"Nodes={','.join(nodes)}",
            "Flags=MAGNETIC,IGNORE_JOBS",
        ]
        if users:
            args.append(f"Users={users}")
        if accounts:
            args.append(f"Accounts={accounts}")
        self.run(*args)

    def end_reservation(self, name: str) -> None:
        """Delete it; one with a running job cannot be deleted, so it ends now instead."""
        try:
            self.run("scontrol", "delete", f"reservation={name}")
        except SlurmError as exc:
            if "in use" not in str(exc):
                raise
            self.run("scontrol", "update", f"reservation={name}", "EndTime=now")

    def power_up(self, node: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=power_up")
