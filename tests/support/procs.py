"""Real processes on 127.0.0.1 for end-to-end tests: the server, node agents, the smart agent."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from tests.support.pg import free_port

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
JITGPU = [sys.executable, "-m", "smart_agent.cli.main"]


def wait_for(
    check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.05
) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError) as exc:
            last_error = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


class Proc:
    """A child process with its output in a log file, stopped (or killed) on demand."""

    def __init__(self, args: list[str], *, log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log_path = log
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        handle = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            self.args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=REPO,
            start_new_session=True,
        )
        handle.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the whole process group: nothing gets to clean up."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            assert self.popen is not None
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        if not self.alive():
            return None if self.popen is None else self.popen.returncode
        assert self.popen is not None
        os.killpg(self.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None


class ServerProc(Proc):
    """`jitgpu server` on a free port, with its admin token; `wait_ready()` blocks on /readyz."""

    def __init__(
        self,
        tmp: Path,
        *,
        database_url: str | None = None,
        admin_token: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
        name: str = "server",
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = admin_token
        db = database_url or f"sqlite:///{tmp / 'jitgpu.db'}"
        super().__init__(
            [*JITGPU, "server", "--port", str(self.port), "--database-url", db],
            log=tmp / f"{name}.log",
            env={"JITGPU_ADMIN_TOKEN": admin_token, **(env or {})},
        )

    def wait_ready(self, timeout: float = 30.0) -> ServerProc:
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"server exited:\n{self.output()[-3000:]}")
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200

        wait_for(ready, timeout=timeout, what=f"server on {self.url}")
        return self

    def heartbeats_served(self) -> float:
        """Heartbeats this server answered so far, by its own metrics."""
        return heartbeats_served_at(self.url, self.admin_token)

    def heartbeat_child(self, port: int, timeout: float = 30.0) -> ChildServer:
        """The heartbeats-role server this one started on `port` (`--heartbeat-port`), once
        it answers."""
        child = ChildServer(f"http://127.0.0.1:{port}", 0, self.admin_token)

        def ready() -> bool:
            try:
                return httpx.get(f"{child.url}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=timeout, what=f"heartbeat server on {child.url}")
        found = re.search(r"heartbeats-role server on port \d+ \(pid (\d+)\)", self.output())
        assert found, self.output()[-2000:]
        child.pid = int(found.group(1))
        return child

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=10,
            headers={"Authorization": f"Bearer {self.admin_token}"},
        )


@dataclass
class ChildServer:
    """The heartbeats-role server a main server started (`--heartbeat-port`); it stops with
    that server."""

    url: str
    pid: int
    admin_token: str

    def heartbeats_served(self) -> float:
        return heartbeats_served_at(self.url, self.admin_token)


def heartbeats_served_at(url: str, admin_token: str) -> float:
    """Heartbeats the server at `url` answered so far (either path: hot or framework), by its
    own metrics."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("jitgpu_hot_route_requests_total") and "/heartbeat" in line
    )
