"""`jitgpu server --heartbeat-port`: the heartbeats-role server as a child of the main one."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from control_plane.config import ServerSettings

log = logging.getLogger(__name__)

# Set in the child's environment: the main server's pid, whose end the child follows.
PARENT_ENV = "JITGPU_PARENT_PID"
STOP_WAIT_S = 10.0


class HeartbeatChild:
    """The child process, and a thread that says so in the log if it ends on its own (its port
    taken, say): the nodes' heartbeats then come back to the main server, which still works,
    only slower, and an operator should know why."""

    def __init__(self, settings: ServerSettings, config: Path | None) -> None:
        self.process = start(settings, config)
        self.port = settings.heartbeat_port
        self._stopping = threading.Event()
        threading.Thread(target=self._watch, name="heartbeat-child", daemon=True).start()

    def stop(self) -> None:
        """Stop it as the main server stops: SIGTERM (a graceful stop), SIGKILL if it hangs."""
        self._stopping.set()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _watch(self) -> None:
        status = self.process.wait()
        if not self._stopping.is_set():
            log.warning(
                "the heartbeats-role server on port %s (pid %d) exited with status %d; node "
                "agents send their heartbeats to this server instead",
                self.port,
                self.process.pid,
                status,
            )


def start(settings: ServerSettings, config: Path | None) -> subprocess.Popen[bytes]:
    """Start `jitgpu server --role heartbeats` on `settings.heartbeat_port`, same host and
    database. Secrets go through its environment, never its command line (which `ps` shows)."""
    assert settings.heartbeat_port is not None
    env = {k: v for k, v in os.environ.items() if k != "JITGPU_HEARTBEAT_PORT"}
    env.update(
        {
            "JITGPU_ROLE": "heartbeats",
            "JITGPU_RUN_JOBS": "false",
            "JITGPU_HOST": settings.host,
            "JITGPU_PORT": str(settings.heartbeat_port),
            "JITGPU_DATABASE_URL": settings.database_url,
            "JITGPU_ADMIN_TOKEN": settings.admin_token or "",
            PARENT_ENV: str(os.getpid()),
        }
    )
    command = [sys.executable, "-m", "smart_agent.cli.main", "server"]
    if config is not None:
        command += ["--config", str(config)]
    return subprocess.Popen(command, env=env)


def follow_parent() -> None:
    """In the child: stop when the main server is gone, even after a kill -9 of it, so that
    no heartbeat server is left answering for a control plane that is not there."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit():
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()
