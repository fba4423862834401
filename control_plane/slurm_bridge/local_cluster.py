"""A throwaway Slurm cluster on 127.0.0.1 (demo, tests, bench): munged, slurmctld, two slurmd.

With `accounting=True` also slurmdbd and its own MariaDB (local_accounting), so that `sacct`
answers; without it (the default, a tenth of the start time) sacct says accounting is off.

The cloud node (`cloud1`) saves power: it starts powered down, its resume program "boots" it
by starting a second `slurmd -N cloud1` after `boot_delay_s`, and its suspend program stops
that slurmd again. GPUs are faked as a GRES count (`AutoDetect=off`), no device needed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from control_plane.slurm_bridge import local_accounting as acct
from control_plane.slurm_bridge.local_files import (
    ALWAYS_ON,
    CLOUD,
    Layout,
    SlurmUnavailable,
    env,
    find_binary,
    free_ports,
    missing_binaries,
    munge_key,
    write_files,
)

__all__ = ["ALWAYS_ON", "CLOUD", "SlurmCluster", "SlurmUnavailable"]


class SlurmCluster:
    def __init__(
        self,
        *,
        boot_delay_s: float = 3.0,
        resume_timeout_s: int = 40,
        suspend_time_s: int = 6,
        gpus_per_node: int = 2,
        accounting: bool = False,
        users: tuple[str, ...] = ("root", "nobody"),
    ) -> None:
        """`accounting`: slurmdbd and a private MariaDB too, so that `sacct` answers; `users`
        are given an association in it (the users tests submit as)."""
        missing = missing_binaries()
        if missing:
            raise SlurmUnavailable(
                f"missing Slurm binaries {missing} (Debian: apt-get install slurm-wlm munge)"
            )
        missing = acct.missing_accounting_binaries() if accounting else []
        if missing:
            raise SlurmUnavailable(
                f"accounting needs {missing}, not installed ({acct.INSTALL_HINT})"
            )
        root = Path(tempfile.mkdtemp(prefix="jitgpu-slurm-"))
        # Other local users reach the munge socket and slurm.conf through it (tests submit
        # as a second user); the munge key's own folder stays closed.
        root.chmod(0o755)
        ctld, always_on, cloud, dbd, db = free_ports(5)
        self.layout = Layout(
            root=root,
            ctld_port=ctld,
            always_on_port=always_on,
            cloud_port=cloud,
            gpus_per_node=gpus_per_node,
            boot_delay_s=boot_delay_s,
            resume_timeout_s=resume_timeout_s,
            suspend_time_s=suspend_time_s,
            accounting=accounting,
            dbd_port=dbd,
            db_port=db,
            db_password=secrets.token_hex(16),
        )
        self.users = users
        self.env = env(self.layout)
        self._procs: list[subprocess.Popen[bytes]] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        layout = self.layout
        try:
            write_files(layout)
            key = munge_key(layout)
            self._spawn(
                "munged",
                "-F",
                "-f",
                f"--socket={layout.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={layout.pidfile('munged')}",
                f"--log-file={layout.log('munged')}",
                f"--seed-file={layout.root / 'munge' / 'seed'}",
                "--num-threads=1",
            )
            self._wait(layout.munge_socket.exists, 10, "munged socket")
            if layout.accounting:
                self._start_accounting()
            self._spawn("slurmctld", "-D", "-i", "-f", str(layout.conf))
            self._wait(lambda: self.scontrol("ping", check=False).returncode == 0, 30, "slurmctld")
            self._spawn("slurmd", "-D", "-f", str(layout.conf), "-N", ALWAYS_ON)
            self._wait(lambda: self.node_state(ALWAYS_ON).startswith("IDLE"), 30, "gpu1 idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_accounting(self) -> None:
        layout = self.layout
        acct.install_db(layout)
        self._spawn("mariadbd", *acct.mariadbd_args(layout))
        self._wait(lambda: acct.db_ready(layout), 60, "mariadbd ready")
        acct.write_dbd_conf(layout, socket.gethostname().split(".")[0])
        self._spawn("slurmdbd", "-D")
        # The first start creates slurmdbd's tables; sacctmgr answers once it listens.
        self._wait(
            lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0,
            60,
            "slurmdbd",
        )
        acct.register(layout, self.env, self.users)

    def stop(self) -> None:
        # A boot still in its delay must not start a slurmd after we are gone: it sees the
        # marker, and is stopped itself.
        with contextlib.suppress(OSError):
            self.layout.stopping.touch()
        self._stop_boots()
        # Jobs first: their slurmstepd outlives slurmd otherwise.
        if self._procs and self._procs[0].poll() is None:
            self._cancel_all_jobs()
        # The cloud node's slurmd was started by the resume program, not by us: its pid file.
        # Our own children are stopped below (a child that exited stays a zombie until it is
        # waited for, so waiting on its pid here would always run to the timeout).
        own = {proc.pid for proc in self._procs}
        for pidfile in self.layout.root.glob("slurmd-*.pid"):
            _kill_pidfile(pidfile, skip=own)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._procs.clear()
        # A slurmd that a boot started while the above ran.
        for pidfile in self.layout.root.glob("slurmd-*.pid"):
            _kill_pidfile(pidfile, skip=own)
        if os.environ.get("JITGPU_KEEP_SLURM_DIR") != "1":
            shutil.rmtree(self.layout.root, ignore_errors=True)

    def _stop_boots(self) -> None:
        """End the resume program's boots still in their delay: only a process whose command
        line names this cluster's folder (a pid in the file may since belong to another)."""
        try:
            pids = [int(x) for x in self.layout.boots.read_text().split()]
        except (OSError, ValueError):
            return
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(self.layout.root).encode() in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)

    def _cancel_all_jobs(self) -> None:
        try:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if not jobs:
                return
            self.run("scancel", *jobs, check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if not self.run("squeue", "-h", "-o", "%i", check=False).stdout.split():
                    return
                time.sleep(0.2)
        except (OSError, subprocess.SubprocessError):
            return

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, *args: str) -> None:
        binary = find_binary(name)
        assert binary is not None
        log = open(self.layout.log(f"{name}-{len(self._procs)}.out"), "wb")  # noqa: SIM115
        self._procs.append(
            subprocess.Popen(
                [binary, *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.layout.root,
            )
        )
        log.close()

    def _wait(self, check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise SlurmUnavailable(
                        f"{proc.args[0]} exited ({proc.returncode}): {self.logs()}"
                    )
            if check():
                return
            time.sleep(0.1)
        raise SlurmUnavailable(f"timed out after {timeout}s waiting for {what}: {self.logs()}")

    def logs(self, tail: int = 1500) -> str:
        parts = []
        for path in sorted(self.layout.root.glob("*.log")) + sorted(self.layout.root.glob("*.out")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    # -- client commands -------------------------------------------------------------------

    def run(
        self, *cmd: str, check: bool = True, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [find_binary(cmd[0]) or cmd[0], *cmd[1:]]
        if user is not None:
            argv = ["runuser", "-u", user, "--", *argv]
        result = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, cwd=self.layout.root
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr}")
        return result

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("scontrol", *args, check=check)

    def sbatch(self, *args: str, user: str | None = None) -> str:
        """Submit `sleep`-like work; returns the job id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.layout.root}", *args, user=user)
        return out.stdout.strip().split(";")[0]

    def node_state(self, node: str) -> str:
        out = self.scontrol("show", "node", node, "-o", check=False).stdout
        for field in out.split():
            if field.startswith("State="):
                return field.split("=", 1)[1]
        return ""

    def job_field(self, job_id: str, field: str) -> str:
        out = self.scontrol("show", "job", job_id, "-o", check=False).stdout
        for item in out.split():
            if item.startswith(f"{field}="):
                return item.split("=", 1)[1]
        return ""


def _kill_pidfile(pidfile: Path, skip: set[int]) -> None:
    try:
        pid = int(pidfile.read_text().strip())
        if pid in skip:
            return
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
