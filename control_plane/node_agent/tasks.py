"""An allocation's task: its command run with the allocation's GPUs visible, watched, stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from control_plane.node_agent.procs import Child, ChildRegistry, OutputTail
from control_plane.node_agent.run_as import RunAs
from control_plane.node_agent.warmup import gpu_env

log = logging.getLogger("jitgpu.node.tasks")

RUNNING, EXITED, FAILED, STOPPED = "running", "exited", "failed", "stopped"
FINAL = frozenset({EXITED, FAILED, STOPPED})


class Task:
    """Status goes None -> running -> exited | failed | stopped; `on_done` fires at the end."""

    def __init__(
        self,
        allocation_id: str,
        command: list[str],
        *,
        gpu_uuids: list[str],
        cwd: Path,
        env: dict[str, str],
        clock: Callable[[], float],
        on_done: Callable[[], None] = lambda: None,
        registry: ChildRegistry | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        self.allocation_id = allocation_id
        self.run_as = run_as
        self.command = list(command)
        self.gpu_uuids = list(gpu_uuids)
        self.cwd = cwd
        self.env = {**gpu_env(env, self.gpu_uuids, cwd), "JITGPU_ALLOCATION_ID": allocation_id}
        self.clock = clock
        self.on_done = on_done
        self.registry = registry or ChildRegistry(None)
        self.tail = OutputTail()
        self.status: str | None = None
        self.exit_code: int | None = None
        self.started_at: float | None = None
        self.seconds: float | None = None
        self._child: Child | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def finished(self) -> bool:
        return self.status in FINAL

    @property
    def pid(self) -> int | None:
        return None if self._child is None else self._child.pid

    def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        child = Child(self.command, env=self.env, cwd=self.cwd, tail=self.tail, run_as=self.run_as)
        try:
            child.start()
        except OSError as exc:
            self.tail.write(f"[jitgpu] cannot start {self.command[0]!r}: {exc.strerror}\n")
            self._end(FAILED, 127)
            return
        self._child = child
        self.started_at = self.clock()
        self.status = RUNNING
        self.registry.add(child, f"task of allocation {self.allocation_id}")
        self._spawn(self._watch, "task")

    def _spawn(self, target: Callable[[], None], what: str) -> None:
        thread = threading.Thread(target=target, name=f"{what}-{self.allocation_id}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _watch(self) -> None:
        assert self._child is not None
        code = self._child.wait()
        self.registry.remove(self._child)
        if self._stopping.is_set():
            self._end(STOPPED, code)
        else:
            self._end(EXITED if code == 0 else FAILED, code)

    def _end(self, status: str, code: int | None) -> None:
        self.exit_code = code
        if self.started_at is not None:
            self.seconds = max(0.0, self.clock() - self.started_at)
        self.status = status
        self.on_done()

    def stop(self, grace_s: float) -> None:
        """Stop the process group (SIGTERM, SIGKILL after `grace_s`) without blocking."""
        if self._child is None or self.finished or self._stopping.is_set():
            return
        self._stopping.set()
        child = self._child
        self._spawn(lambda: child.stop(grace_s), "stop")

    def join(self, timeout: float | None = None) -> None:
        for thread in list(self._threads):
            thread.join(timeout)
