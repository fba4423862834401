"""Level-triggered reconciliation: make what the node runs match what the control plane wants."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from control_plane.node_agent.config import AgentConfig
from control_plane.node_agent.local import HOLD_WARMUP, LocalAllocation, LocalHold, Report
from control_plane.node_agent.procs import ChildRegistry
from control_plane.node_agent.run_as import resolve_run_as
from control_plane.node_agent.task_env import clean_env
from control_plane.node_agent.tasks import FINAL, Task
from control_plane.node_agent.warmup import Warmup
from control_plane.schemas.enums import TaskStatus
from control_plane.schemas.nodes import NodeAssignment

log = logging.getLogger("jitgpu.node")

WARMING_STATES = ("placed", "warming")
RESTARTED = "the node agent restarted while this task ran, so its process was stopped"
DISABLED = "this node does not run tasks (tasks.enabled is false in its config)"


class Work:
    """The holds being warmed or kept and the allocations being served on this node."""

    def __init__(
        self,
        cfg: AgentConfig,
        *,
        clock: Callable[[], float],
        env: dict[str, str],
        on_change: Callable[[], None] = lambda: None,
        registry: ChildRegistry | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        # Filtered here, the one place every task and warm-up gets its environment from.
        self.env = clean_env(env, cfg.tasks.pass_env)
        # Checked when the config was loaded; resolved again here for the ids.
        self.run_as = resolve_run_as(cfg.tasks.user, source="node-agent settings")
        if self.run_as is not None:
            self.env["HOME"] = self.run_as.home
            # Jobs run in cache_dir and warm-up commands fill it: it is the jobs' user's.
            cfg.cache_path.mkdir(parents=True, exist_ok=True)
            self.run_as.give(cfg.cache_path)
        self.on_change = on_change
        self.registry = registry or ChildRegistry(None)
        self.cache_dir: Path = cfg.cache_path
        self.holds: dict[str, LocalHold] = {}
        self.allocations: dict[str, LocalAllocation] = {}

    # --- desired state -------------------------------------------------------------------
    def apply(self, assignments: list[NodeAssignment]) -> None:
        holds = {a.id: a for a in assignments if a.kind == "hold"}
        allocs = {a.id: a for a in assignments if a.kind == "allocation"}
        in_allocations = {u for a in allocs.values() for u in a.gpu_uuids}
        for a in holds.values():
            self._want_hold(a)
        for hold_id, local in list(self.holds.items()):
            if hold_id not in holds:
                self._drop_hold(local, kept=set(local.gpu_uuids) & in_allocations)
        for a in allocs.values():
            self._want_allocation(a)
        for alloc_id, local in list(self.allocations.items()):
            if alloc_id not in allocs:
                self._drop_allocation(local)
        self.tick()

    def _warmup(self, kind: str, owner_id: str, profile: str | None, gpus: list[str]) -> Warmup:
        """A warm-up of `profile` on these GPUs; no profile name runs nothing."""
        warmup = Warmup(
            owner_id,
            profile or "(none)",
            [] if profile is None else self.cfg.profile(profile),
            gpu_uuids=list(gpus),
            cache_dir=self.cache_dir,
            env=self.env,
            clock=self.clock,
            on_done=self.on_change,
            registry=self.registry,
            run_as=self.run_as,
            known_profiles=self.cfg.profile_names(),
            kind=kind,
        )
        log.info("%s: warm-up %r started on GPU(s) %s", warmup.label, profile, ",".join(gpus))
        return warmup.start()

    def _want_hold(self, a: NodeAssignment) -> None:
        local = self.holds.get(a.id)
        if local is not None and sorted(local.gpu_uuids) != sorted(a.gpu_uuids):
            log.info("hold %s: moved to GPU(s) %s; warming again", a.id, ",".join(a.gpu_uuids))
            self._cancel_hold(local)
            local = None
        if a.status in WARMING_STATES:
            result = None if local is None or local.warmup is None else local.warmup.result
            if (
                local is None
                or local.warmup is None
                or (result is not None and result.ok and local.final_sent)
            ):
                # New here, or the control plane had it ready and wants it warmed again.
                warmup = self._warmup("hold", a.id, a.warmup, a.gpu_uuids)
                self.holds[a.id] = LocalHold(a.id, list(a.gpu_uuids), warmup, profile=a.warmup)
            elif result is None and a.status == "placed" and local.started_sent:
                local.started_sent = False  # the control plane forgot: tell it again
        elif a.status == "ready" and local is None:
            self.holds[a.id] = LocalHold(a.id, list(a.gpu_uuids), None, final_sent=True)
            log.info(
                "hold %s: holding %d warm GPU(s) until claim or expiry", a.id, len(a.gpu_uuids)
            )

    def _drop_hold(self, local: LocalHold, *, kept: set[str]) -> None:
        """The hold left the desired state; `kept` are its GPUs an allocation now has."""
        if local.claimed:
            return
        claimed = kept == set(local.gpu_uuids)
        if kept and local.unreported:
            # It finished warming just before the claim: its report makes the job's GPUs
            # usable on the control plane, so send it before forgetting the hold.
            local.claimed = True
            local.gpu_uuids = [u for u in local.gpu_uuids if u in kept]
            return
        if local.warming and kept and not claimed:
            self._partly_claimed(local, kept)
            return
        if local.warming and claimed:
            local.claimed = True
            log.info("hold %s: claimed while warming; finishing the warm-up first", local.id)
            return
        if local.warming:
            log.info("hold %s: ended on the control plane; stopping its warm-up", local.id)
            self._cancel_hold(local)
        elif kept:
            log.info(
                "hold %s: %d of its %d GPU(s) claimed; they now serve the allocation",
                local.id,
                len(kept),
                len(local.gpu_uuids),
            )
        else:
            log.info("hold %s: ended on the control plane (cancelled, expired or moved)", local.id)
        self.holds.pop(local.id, None)

    def _partly_claimed(self, local: LocalHold, kept: set[str]) -> None:
        """A job took some of a warming hold's GPUs and the control plane gave the others back.

        A warm-up is one process on all the hold's GPUs and cannot shrink, so it stops (the
        GPUs given back may already be another's) and starts again on the kept GPUs only.
        Its end is reported on the hold, which makes the job's GPUs count as usable.
        """
        gpus = [u for u in local.gpu_uuids if u in kept]
        released = len(local.gpu_uuids) - len(gpus)
        log.info(
            "hold %s: %d GPU(s) claimed mid-warm-up, %d released; warming the kept ones again",
            local.id,
            len(gpus),
            released,
        )
        self._cancel_hold(local)
        warmup = self._warmup("hold", local.id, local.profile, gpus)
        # Claimed on the control plane already: its start needs no report, its end does.
        self.holds[local.id] = LocalHold(
            local.id, gpus, warmup, profile=local.profile, started_sent=True, claimed=True
        )

    def _cancel_hold(self, local: LocalHold) -> None:
        if local.warmup is not None and not local.warmup.done:
            local.warmup.cancel()
        self.holds.pop(local.id, None)

    def _want_allocation(self, a: NodeAssignment) -> None:
        local = self.allocations.get(a.id)
        if local is not None:
            final = local.final_status()
            if final and a.task_status not in FINAL and local.sent_status == final:
                local.sent_status = None  # the control plane missed our final report
            if a.warmup is not None and local.warmup_sent:
                local.warmup_sent = False  # it still waits for the cold start: tell it again
            return
        local = LocalAllocation(a.id, list(a.gpu_uuids), a.command)
        self.allocations[a.id] = local
        if a.command is None:
            log.info("allocation %s: %d GPU(s) in use (no command to run)", a.id, len(a.gpu_uuids))
        elif a.task_status in FINAL:
            local.sent_status = a.task_status  # finished before; nothing to do
        elif a.task_status in (TaskStatus.STARTING.value, TaskStatus.RUNNING.value):
            local.verdict = (TaskStatus.FAILED.value, None, f"[jitgpu] {RESTARTED}\n")
            return
        elif not self.cfg.tasks.enabled:
            local.verdict = (TaskStatus.FAILED.value, None, f"[jitgpu] {DISABLED}\n")
            return
        else:
            local.pending_start = True
        if a.warmup is not None:
            # A reactive allocation asked for a warm-up: its GPUs count as usable (and its
            # task starts) once that ends.
            local.warmup = self._warmup("allocation", a.id, a.warmup, a.gpu_uuids)

    def _drop_allocation(self, local: LocalAllocation) -> None:
        if local.warming:
            assert local.warmup is not None
            local.warmup.cancel()
        if local.running:
            assert local.task is not None
            if not local.ended:
                log.info(
                    "allocation %s: ended on the control plane; stopping its task (group %s)",
                    local.id,
                    local.task.pid,
                )
                local.task.stop(self.cfg.tasks.stop_grace_s)
            local.ended = True
            return
        if local.ended and local.task is not None and local.sent_status != local.task.status:
            return  # its last report is still due
        if not local.ended:
            log.info("allocation %s: released", local.id)
        self.allocations.pop(local.id, None)

    # --- local progress --------------------------------------------------------------------
    def tick(self) -> None:
        """Start tasks whose GPUs finished warming; forget what is fully reported."""
        for local in list(self.allocations.values()):
            if local.ended and not local.running and local.sent_status == local.final_status():
                self.allocations.pop(local.id, None)
                continue
            if local.pending_start and local.command:
                if local.warming or self._hold_warming(local.gpu_uuids):
                    if not local.logged_wait:
                        local.logged_wait = True
                        log.info("allocation %s: task waits for its GPUs to warm", local.id)
                    continue
                self._start_task(local)
        for hold in list(self.holds.values()):
            result = None if hold.warmup is None else hold.warmup.result
            if hold.claimed and result is not None and (hold.final_sent or result.cancelled):
                self.holds.pop(hold.id, None)

    def _hold_warming(self, gpu_uuids: list[str]) -> bool:
        wanted = set(gpu_uuids)
        return any(h.warming and wanted & set(h.gpu_uuids) for h in self.holds.values())

    def _start_task(self, local: LocalAllocation) -> None:
        assert local.command is not None
        local.pending_start = False
        task = Task(
            local.id,
            local.command,
            gpu_uuids=local.gpu_uuids,
            cwd=self.cache_dir,
            env=self.env,
            clock=self.clock,
            on_done=self.on_change,
            registry=self.registry,
            run_as=self.run_as,
        )
        local.task = task
        task.start()
        # Started, even if it has finished already (a short command may, by now).
        if task.started_at is not None:
            log.info(
                "allocation %s: task started (pid %s) on GPU(s) %s: %s",
                local.id,
                task.pid,
                ",".join(local.gpu_uuids),
                " ".join(local.command)[:200],
            )

    def busy(self) -> bool:
        return any(h.warming for h in self.holds.values()) or any(
            a.warming or a.running for a in self.allocations.values()
        )

    def stop_all(self, grace_s: float) -> None:
        """Shutdown: stop every warm-up and task (process groups) and wait for them."""
        warmups = [h.warmup for h in self.holds.values() if h.warmup is not None]
        warmups += [a.warmup for a in self.allocations.values() if a.warmup is not None]
        tasks = [a.task for a in self.allocations.values() if a.task is not None]
        for warmup in warmups:
            if not warmup.done:
                warmup.cancel()
        for task in tasks:
            task.stop(grace_s)
        for warmup in warmups:
            warmup.join(grace_s + 10)
        for task in tasks:
            task.join(grace_s + 10)

    def forget(self, report: Report) -> None:
        """The control plane no longer knows the target: stop caring about it."""
        if report.kind == HOLD_WARMUP:
            hold = self.holds.pop(report.target, None)
            if hold is not None and hold.warming:
                assert hold.warmup is not None
                hold.warmup.cancel()
            return
        alloc = self.allocations.pop(report.target, None)
        if alloc is not None:
            if alloc.warming:
                assert alloc.warmup is not None
                alloc.warmup.cancel()
            if alloc.running:
                assert alloc.task is not None
                alloc.task.stop(self.cfg.tasks.stop_grace_s)

    # --- reports ---------------------------------------------------------------------------
    def due_reports(self) -> Iterator[Report]:
        for hold in list(self.holds.values()):
            report = hold.due()
            if report is not None:
                yield report
        interval = self.cfg.tasks.output_report_interval_s
        for alloc in list(self.allocations.values()):
            for report in (alloc.due_warmup(), alloc.due_task(now=self.clock(), interval=interval)):
                if report is not None:
                    yield report
