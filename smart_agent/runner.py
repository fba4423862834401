"""Runs the agent: sources feed one queue, APScheduler adds periodic ticks, one worker thread
does everything else; the policy file is reloaded when it changes."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from predictors.llm_outcome import LlmOutcome
from predictors.types import Event, EventKind
from smart_agent.agent import Agent, Notify
from smart_agent.client import Client
from smart_agent.config import AgentConfig, token_of
from smart_agent.policy import Policy
from smart_agent.predictor_set import PredictorSet
from smart_agent.predlog import PredictionLog
from smart_agent.sources import Sources
from smart_agent.yamlconf import ConfigError, load_model

log = logging.getLogger("jitgpu.agent")

CYCLE, RECONCILE, STOP = "cycle", "reconcile", "stop"
# How long a stop waits for the step in hand; configs/jitgpu-agent.service gives systemd a
# TimeoutStopSec well above it, so that the holds are cancelled before any SIGKILL.
STOP_JOIN_S = 30.0
UNRECOGNIZED_KEY = "inputs.unrecognized"  # prediction-log meta: files no line was read of


class PolicyFile:
    """The policy in force, re-read when the file changes; a bad edit keeps the old one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.policy = load_model(Policy, path)
        self._stamp = self._stat()

    def _stat(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime, st.st_size

    def reload(self) -> bool:
        """True when a changed, valid file replaced the policy."""
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            policy = load_model(Policy, self.path)
        except ConfigError as exc:
            log.error("policy edit refused, keeping the previous policy:\n%s", exc)
            return False
        changed = policy != self.policy
        self.policy = policy
        if changed:
            log.info("policy reloaded from %s", self.path)
        return changed


@dataclass
class _Tick:
    kind: str


class Runner:
    """The agent as a daemon: start(), then stop() (from a signal handler or a test)."""

    def __init__(
        self,
        config: AgentConfig,
        policy_path: Path,
        *,
        clock: Callable[[], float] = time.time,
        notify: Notify | None = None,
        client: Client | None = None,
        sources_kwargs: dict[str, Any] | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.policy_file = PolicyFile(policy_path)
        self.client = client or Client(config.server, token_of(config))
        self.log = PredictionLog(config.prediction_log)
        self._llm_kwargs = llm_kwargs
        self.agent = Agent(
            user=config.user,
            policy=self.policy_file.policy,
            client=self.client,
            log_=self.log,
            predictors=self._predictors(self.policy_file.policy),
            clock=clock,
            lease_s=config.lease_s,
            allocate_on_miss=config.allocate_on_miss,
            notify=notify,
            arrival_max_age_s=config.arrival_max_age_s,
            max_job_gpus=config.max_job_gpus,
        )
        self._queue: queue.Queue[Event | _Tick] = queue.Queue(maxsize=100_000)
        self.sources = Sources(
            config,
            self._offer,
            clock=clock,
            on_unrecognized=self._unrecognized,
            **(sources_kwargs or {}),
        )
        self.debouncer = self.sources.debouncer(window_s=config.debounce_s, clock=time.monotonic)
        self._scheduler = BackgroundScheduler(daemon=True)
        self._worker = threading.Thread(target=self._work, name="agent", daemon=True)
        self.dropped = 0
        self.cycles = 0

    def _predictors(self, policy: Policy) -> PredictorSet:
        return PredictorSet(policy, on_llm_outcome=self._llm_outcome, llm_kwargs=self._llm_kwargs)

    def _llm_outcome(self, outcome: LlmOutcome) -> None:
        record = outcome.to_log()
        self.log.llm_call(
            at=record["at"],
            status=record["status"],
            model=record["model"],
            prompt_version=record["prompt_version"],
            prompt_tokens=record["prompt_tokens"],
            completion_tokens=record["completion_tokens"],
            usd=record["usd"],
            latency_s=record["latency_s"],
            detail=record["error"],
        )

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._scheduler.add_job(
            self._tick,
            "interval",
            args=[CYCLE],
            seconds=self.config.cycle_s,
            id=CYCLE,
            coalesce=True,
        )
        self._scheduler.add_job(
            self._tick,
            "interval",
            args=[RECONCILE],
            seconds=self.config.reconcile_s,
            id=RECONCILE,
            coalesce=True,
        )
        self._worker.start()
        self.sources.start()
        self._scheduler.start()
        log.info(
            "agent for %s watching %d path(s), policy %s, cycle every %gs",
            self.config.user,
            len(self.config.watch),
            self.policy_file.path,
            self.config.cycle_s,
        )

    def stop(self, *, cancel_holds: bool | None = None) -> None:
        self._scheduler.shutdown(wait=False)
        self.sources.stop()
        self._queue.put(_Tick(STOP))
        self._worker.join(timeout=STOP_JOIN_S)
        if self.config.cancel_on_exit if cancel_holds is None else cancel_holds:
            n = self.agent.cancel_all()
            log.info("cancelled %d hold(s) on exit", n)
        self.client.close()
        self.log.close()

    # --- inputs ----------------------------------------------------------------------
    def _offer(self, event: Event) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1  # a flood must not grow memory without bound

    def _tick(self, kind: str) -> None:
        self._queue.put(_Tick(kind))

    # --- the one thread that touches the agent ---------------------------------------
    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=0.25)
            except queue.Empty:
                item = None
            try:
                if isinstance(item, _Tick) and item.kind == STOP:
                    return
                self._handle(item)
                if self.debouncer.poll():
                    self._cycle("burst", None)
            except Exception:  # the daemon survives any one failure; it is logged
                log.exception("agent step failed")

    def _handle(self, item: Event | _Tick | None) -> None:
        if isinstance(item, Event):
            self.agent.observe(item)
            if self.debouncer.offer(item):
                trigger = "cue" if item.kind is EventKind.CUE else str(item.kind)
                self._cycle(trigger, item.cue)
        elif isinstance(item, _Tick) and item.kind == CYCLE:
            self._cycle("timer", None)
        elif isinstance(item, _Tick) and item.kind == RECONCILE:
            self.agent.reconcile()
            if self.policy_file.reload():
                self._apply_policy(self.policy_file.policy)

    def _cycle(self, trigger: str, cue: str | None) -> None:
        self.agent.cycle(trigger=trigger, cue=cue)
        self.debouncer.cycle_ran()
        self.cycles += 1

    def _apply_policy(self, policy: Policy) -> None:
        old = self.agent.policy
        self.agent.policy = policy
        # The budget and the lead shape the priced burst member: a change rebuilds it too.
        if (old.predictors, old.ensemble, old.llm, old.idle_budget, old.lead_s) != (
            policy.predictors,
            policy.ensemble,
            policy.llm,
            policy.idle_budget,
            policy.lead_s,
        ):
            self.agent.predictors = self._predictors(policy)

    def _unrecognized(self, label: str) -> None:
        """Kept in the prediction log, so `jitgpu agent status` can say it."""
        self.log.set_meta(UNRECOGNIZED_KEY, json.dumps(self.sources.unrecognized))

    def status(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "queue": self._queue.qsize(),
            "dropped": self.dropped,
            "sources": self.sources.stats(),
            "debounce": self.debouncer.stats.as_dict(),
        }
