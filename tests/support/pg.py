"""A throwaway PostgreSQL server from the installed binaries, on 127.0.0.1 and a free port."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg


class PostgresUnavailable(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_bin_dir() -> Path | None:
    """Debian keeps initdb and pg_ctl off the PATH, in the versioned folder of its package."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


class TempPostgres:
    """initdb + pg_ctl start in a temporary folder; `stop()` (or the context) removes it."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.bin_dir = find_bin_dir()
        if self.bin_dir is None:
            raise PostgresUnavailable("no initdb/pg_ctl found (install the postgresql package)")
        self.fsync = fsync
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="jitgpu-pg-"))
        self.data = self.dir / "data"
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_postgres:
            # PostgreSQL refuses to run as root: run it as the postgres user.
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_quote(c) for c in cmd)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise PostgresUnavailable(f"{args[0]} failed: {result.stderr.strip()[-500:]}")
        return result

    def start(self) -> TempPostgres:
        if self._as_postgres:
            shutil.chown(self.dir, user="postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.resume()
        return self

    def resume(self) -> None:
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=200"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"
        )

    def pause(self) -> None:
        """Stop the server but keep its data (to test a database that goes away)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def stop(self) -> None:
        self.pause()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(sql)

    def create_database(self, template: str | None = None) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.admin(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"
