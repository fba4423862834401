"""What the agent runs for each hold and allocation, and the reports each one still owes."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from control_plane.node_agent.tasks import RUNNING, Task
from control_plane.node_agent.warmup import Warmup, WarmupResult
from control_plane.schemas.enums import TaskStatus
from control_plane.schemas.nodes import TaskReport, WarmupReport

log = logging.getLogger("jitgpu.node")

MAX_WARMUP_S = 86400.0
HOLD_WARMUP, ALLOCATION_WARMUP, TASK = "hold-warmup", "allocation-warmup", "task"


@dataclass
class Report:
    """A report that is due, and what to remember once the control plane has it."""

    kind: str  # HOLD_WARMUP | ALLOCATION_WARMUP | TASK
    target: str
    body: WarmupReport | TaskReport
    sent: Callable[[], None] = field(default=lambda: None)


def _final_warmup(result: WarmupResult) -> WarmupReport:
    return WarmupReport(
        ok=result.ok,
        warmup_s=min(MAX_WARMUP_S, round(result.seconds, 3)),
        exit_code=result.exit_code,
        output_tail=None if result.ok else result.output_tail,
    )


def _log_warmup(what: str, result: WarmupResult) -> None:
    if result.ok:
        log.info("%s: warm-up finished in %.2fs: ready", what, result.seconds)
        return
    last = result.output_tail.strip().splitlines()[-1:] or [""]
    log.warning(
        "%s: warm-up failed after %.2fs (exit %s): %s",
        what,
        result.seconds,
        result.exit_code,
        last[0],
    )


@dataclass
class LocalHold:
    id: str
    gpu_uuids: list[str]
    warmup: Warmup | None  # None: found ready on the control plane, nothing to run
    started_sent: bool = False
    final_sent: bool = False
    logged: bool = False
    claimed: bool = False  # claimed mid-warm-up: finish, report, then forget
    profile: str | None = None  # its warm-up profile, to warm again what a claim kept

    @property
    def warming(self) -> bool:
        return self.warmup is not None and not self.warmup.done

    @property
    def unreported(self) -> bool:
        """Its warm-up ended and the control plane has not heard how."""
        result = None if self.warmup is None else self.warmup.result
        return result is not None and not result.cancelled and not self.final_sent

    def due(self) -> Report | None:
        if self.warmup is None:
            return None
        result = self.warmup.result
        if result is None:
            if self.started_sent:
                return None
            body = WarmupReport(ok=True, warmup_s=0.0, started=True)
            return Report(HOLD_WARMUP, self.id, body, lambda: setattr(self, "started_sent", True))
        if result.cancelled or self.final_sent:
            return None
        if not self.logged:
            self.logged = True
            _log_warmup(f"hold {self.id}", result)
        return Report(
            HOLD_WARMUP, self.id, _final_warmup(result), lambda: setattr(self, "final_sent", True)
        )


@dataclass
class LocalAllocation:
    id: str
    gpu_uuids: list[str]
    command: list[str] | None
    # A reactive allocation's cold start: run before the task, reported on its own.
    warmup: Warmup | None = None
    warmup_sent: bool = False
    warmup_logged: bool = False
    task: Task | None = None
    pending_start: bool = False
    # A final status decided without a process: (status, exit code, output tail).
    verdict: tuple[str, int | None, str] | None = None
    sent_status: str | None = None
    sent_tail_version: int = -1
    sent_at: float = -math.inf
    ended: bool = False  # gone from the desired state: forget once the last report is out
    logged: bool = False
    logged_wait: bool = False

    @property
    def warming(self) -> bool:
        return self.warmup is not None and not self.warmup.done

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.finished

    def final_status(self) -> str | None:
        if self.verdict is not None:
            return self.verdict[0]
        if self.task is not None and self.task.finished:
            return self.task.status
        return None

    def due_warmup(self) -> Report | None:
        result = None if self.warmup is None else self.warmup.result
        if result is None or result.cancelled or self.warmup_sent:
            return None
        if not self.warmup_logged:
            self.warmup_logged = True
            _log_warmup(f"allocation {self.id}", result)
        return Report(
            ALLOCATION_WARMUP,
            self.id,
            _final_warmup(result),
            lambda: setattr(self, "warmup_sent", True),
        )

    def due_task(self, *, now: float, interval: float) -> Report | None:
        task = self.task
        if self.verdict is not None:
            status, code, tail = self.verdict
            if self.sent_status == status:
                return None
            if not self.logged:
                self.logged = True
                log.warning("allocation %s: task %s: %s", self.id, status, tail.strip())
            return self._body(status, code, tail, 0, now)
        if task is None:
            if self.pending_start and self.logged_wait and self.sent_status is None:
                return self._body(TaskStatus.STARTING.value, None, None, -1, now)
            return None
        if task.status == RUNNING:
            changed = task.tail.version != self.sent_tail_version
            if self.sent_status != RUNNING or (changed and now - self.sent_at >= interval):
                return self._body(RUNNING, None, task.tail.text(), task.tail.version, now)
            return None
        if task.finished and self.sent_status != task.status:
            if not self.logged:
                self.logged = True
                log.info(
                    "allocation %s: task %s with status %s after %.2fs",
                    self.id,
                    task.status,
                    task.exit_code,
                    task.seconds or 0.0,
                )
            return self._body(
                str(task.status), task.exit_code, task.tail.text(), task.tail.version, now
            )
        return None

    def _body(
        self, status: str, code: int | None, tail: str | None, version: int, now: float
    ) -> Report:
        def sent() -> None:
            self.sent_status = status
            self.sent_tail_version = version
            self.sent_at = now

        body = TaskReport(status=TaskStatus(status), exit_code=code, output_tail=tail or None)
        return Report(TASK, self.id, body, sent)
