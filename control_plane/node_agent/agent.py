"""The node agent's loop: register, heartbeat with telemetry, reconcile, report, drain on stop."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from importlib import metadata

from control_plane.node_agent.client import (
    ApiError,
    Backoff,
    ControlPlane,
    NotFound,
    Refused,
    Rejected,
    Unreachable,
)
from control_plane.node_agent.config import AgentConfig
from control_plane.node_agent.gpus import Discovery, GpuBackend, GpuSample
from control_plane.node_agent.identity import CREDENTIAL_PREFIX, CredentialStore
from control_plane.node_agent.local import HOLD_WARMUP, Report
from control_plane.node_agent.procs import ChildRegistry
from control_plane.node_agent.reconcile import Work
from control_plane.node_agent.senders import Outcome, ReportSenders
from control_plane.node_agent.telemetry import HostProbe, gpu_telemetry
from control_plane.schemas.enums import NodeStatus, TaskStatus
from control_plane.schemas.nodes import (
    GpuSpec,
    Heartbeat,
    HeartbeatReply,
    NodeRegister,
    TaskReport,
    WarmupReport,
)

log = logging.getLogger("jitgpu.node")

EXIT_OK, EXIT_REFUSED = 0, 3
FINAL_TASK_STATUSES = (TaskStatus.EXITED, TaskStatus.FAILED, TaskStatus.STOPPED)


def agent_version() -> str:
    try:
        return f"jitgpu-node {metadata.version('jitgpu')}"
    except metadata.PackageNotFoundError:
        return "jitgpu-node dev"


class Agent:
    """One node: its GPUs (through a backend), its work, and its link to the control plane.

    `clock` is monotonic seconds and `wait(seconds)` pauses the loop; tests pass their own so
    that no test sleeps. Worker threads (warm-ups, tasks) wake the loop when they finish, so a
    result is reported at once rather than at the next heartbeat.
    """

    def __init__(
        self,
        cfg: AgentConfig,
        backend: GpuBackend,
        client: ControlPlane,
        *,
        name: str,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
        wait: Callable[[float], None] | None = None,
        env: dict[str, str] | None = None,
        registry: ChildRegistry | None = None,
        discovery: Discovery | None = None,
        watch: ControlPlane | None = None,
        credentials: CredentialStore | None = None,
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.client = client
        self.name = name
        self.clock = clock
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.registry = registry or ChildRegistry(None)
        self.work = Work(
            cfg,
            clock=clock,
            env=dict(os.environ) if env is None else env,
            on_change=self.wake.set,
            registry=self.registry,
        )
        self.backoff = Backoff(
            cfg.backoff.initial_s, cfg.backoff.max_s, cfg.backoff.multiplier, rng
        )
        self._wait = wait or self._wait_for_wake
        cfg.cache_path.mkdir(parents=True, exist_ok=True)
        self.host = HostProbe(cfg.cache_path)
        self.discovery = discovery or backend.discover()
        self.credentials = credentials or CredentialStore.for_node(cfg.state_path, name)
        self.enrolled = False
        # Tokens this process has traded already: each is tried once (most are single-use).
        self._spent: set[str] = set()
        self.node_id: str | None = None
        self.registered = False
        self.status: str | None = None
        self._healthy: dict[str, bool] = {}
        # The long poll: its own client and thread; it hands each answer to the main loop,
        # which alone applies desired state (in epoch order: a reply older than one applied
        # is dropped, since a heartbeat and a poll may cross).
        self.watch = watch
        self._pushed: HeartbeatReply | None = None
        self._pushed_lock = threading.Lock()
        self._epoch: int | None = None
        self.senders = ReportSenders(self._send, self.wake.set)  # reports off the loop

    def request_stop(self) -> None:
        """Safe from a signal handler: the loop notices at once and shuts down."""
        self.stopping.set()
        self.wake.set()

    def _wait_for_wake(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    # --- identity --------------------------------------------------------------------------
    def enrol(self) -> None:
        """Use the stored credential, or enrol once and store it; else use --token as given."""
        stored = self.credentials.load()
        if stored is not None and stored.name == self.name:
            self.client.set_token(stored.credential)
            self.enrolled = True
            return
        token = self.cfg.enrol_token
        if token is None and self.cfg.token and not self.cfg.token.startswith(CREDENTIAL_PREFIX):
            token = self.cfg.token  # the admin token, or a node token from before enrolment
        if token is None:
            if self.cfg.token:
                self.client.set_token(self.cfg.token)  # a node credential given as is
            self.enrolled = True
            return
        self._enrol_with(token)

    def _enrol_with(self, token: str) -> None:
        self._spent.add(token)
        credential = self.client.enrol(self.name, token)
        self.credentials.save(credential, server=self.client.server)
        self.client.set_token(credential.credential)
        self.enrolled = True
        log.info(
            "enrolled as node %s (%s); credential %s... kept in %s",
            credential.name,
            credential.node_id,
            credential.prefix,
            self.credentials.path,
        )

    def rotate(self) -> None:
        """The control plane asked for a new credential: get it, keep it, use it."""
        assert self.node_id is not None
        credential = self.client.rotate(self.node_id)
        try:
            self.credentials.save(credential, server=self.client.server)
        except OSError as exc:
            # The old credential is already void: go on with the new one in memory.
            log.error(
                "could not store the rotated credential in %s: %s", self.credentials.path, exc
            )
        self.client.set_token(credential.credential)
        log.info("rotated this node's credential (now %s...)", credential.prefix)

    # --- one round -------------------------------------------------------------------------
    def register(self) -> None:
        if not self.enrolled:
            self.enrol()
        try:
            self._register()
        except Refused as exc:
            retry = self._enrol_again_with(exc)
            if retry is None:
                raise
            self._enrol_with(retry)
            self._register()

    def _enrol_again_with(self, exc: Refused) -> str | None:
        """The token to enrol with after `exc`, or None when enrolling again cannot help."""
        # A node token from before node identity may still enrol this node once.
        if exc.code == "enrolment_required" and self.cfg.token not in (None, *self._spent):
            return self.cfg.token
        # The credential in use is void (revoked, or a new database): an enrolment token
        # not yet traded by this process enrols the node again.
        token = self.cfg.enrol_token
        if exc.status == 401 and token is not None and token not in self._spent:
            self.credentials.forget()
            return token
        return None

    def _register(self) -> None:
        gpus = [
            GpuSpec(uuid=g.uuid, model=g.model, memory_mb=g.memory_mb or 0, index=g.index)
            for g in self.discovery.gpus
        ]
        body = NodeRegister(
            name=self.name,
            spine=self.cfg.spine,
            leaf=self.cfg.leaf,
            gpus=gpus,
            agent_version=agent_version(),
        )
        node = self.client.register(body)
        self.node_id = node.id
        if node.heartbeat_port and not self.cfg.heartbeat_server:
            # The server runs a heartbeats-role process beside it; a configured one wins.
            self.client.beat_to_port(node.heartbeat_port)
            log.info("heartbeats go to %s, as the server says", self.client.heartbeats)
        self._epoch = None  # perhaps a new database: its epochs start again
        self.registered = True
        self.status = node.status.value
        log.info(
            "registered as %s (%s) with %d GPU(s) on %s/%s",
            node.name,
            node.id,
            len(node.gpus),
            node.spine,
            node.leaf,
        )

    def samples(self) -> list[GpuSample]:
        try:
            samples = self.backend.sample()
        except Exception as exc:  # no GPU reading may stop the heartbeat itself
            log.warning("GPU sampling failed (%r); heartbeat without GPU telemetry", exc)
            return []
        for s in samples:
            before = self._healthy.get(s.uuid, True)
            if s.healthy != before:
                if s.healthy:
                    log.info("GPU %s healthy again", s.uuid)
                else:
                    log.warning("GPU %s unhealthy: %s", s.uuid, s.reason)
            self._healthy[s.uuid] = s.healthy
        return samples

    def heartbeat_body(self, *, draining: bool = False) -> Heartbeat:
        return Heartbeat(
            gpus=[gpu_telemetry(s) for s in self.samples()],
            host=self.host.sample(),
            draining=draining,
        )

    def beat(self) -> None:
        """Register if needed, heartbeat, apply the desired state. Raises ApiError."""
        if not self.registered:
            self.register()
        assert self.node_id is not None
        body = self.heartbeat_body()
        try:
            reply = self.client.heartbeat(self.node_id, body)
        except NotFound:
            log.warning(
                "the control plane does not know node %s (new database?); registering again",
                self.node_id,
            )
            self.register()
            reply = self.client.heartbeat(self.node_id, body)
        except Refused as exc:
            token = self._enrol_again_with(exc)
            if token is None:
                raise
            log.warning("the control plane refused this node's credential (%s); enrolling", exc)
            self._enrol_with(token)
            self._register()
            reply = self.client.heartbeat(self.node_id, body)
        if reply.status.value != self.status:
            if reply.status == NodeStatus.DRAINING and not body.draining:
                log.info(
                    "the control plane drains this node: nothing new will be placed here; "
                    "holds and tasks already here go on"
                )
            else:
                log.info("control plane reports this node %s", reply.status.value)
            self.status = reply.status.value
        self.apply(reply)

    def apply(self, reply: HeartbeatReply) -> None:
        """Make the desired state of `reply` true here, unless it is older than one applied."""
        if reply.epoch is not None:
            if self._epoch is not None and reply.epoch < self._epoch:
                return
            self._epoch = reply.epoch
        self.work.apply(reply.assignments)
        if reply.rotate_credential:
            self.rotate()

    def fetch_work(self) -> None:
        """Ask for the desired state now (after a task's exit freed GPUs for the next one)."""
        if self.node_id is not None:
            self.apply(self.client.work(self.node_id))

    def _apply_pushed(self) -> None:
        with self._pushed_lock:
            reply, self._pushed = self._pushed, None
        if reply is not None and reply.node_id == self.node_id:
            self.apply(reply)

    def _watch_loop(self) -> None:
        """Long-poll the node's work and hand each answer to the main loop."""
        assert self.watch is not None
        since: str | None = None
        polled: str | None = None
        while not self.stopping.is_set():
            node_id = self.node_id if self.registered else None
            if node_id is None:
                self.stopping.wait(0.05)
                continue
            if node_id != polled:
                since, polled = None, node_id
            try:
                reply = self.watch.work(node_id, since=since, wait_s=self.cfg.long_poll_s)
            except Exception as exc:  # the client closed at shutdown, or the server failed
                if self.stopping.is_set():
                    return
                # The main loop's heartbeat reports problems and backs off; here only pause.
                log.debug("long poll failed (%r); polling again shortly", exc)
                since = None
                self.stopping.wait(min(self.cfg.heartbeat_interval_s, 1.0))
                continue
            since = reply.version
            with self._pushed_lock:
                self._pushed = reply
            self.wake.set()

    def flush(self, *, wait: bool = True) -> None:
        """Send every due report; raises Unreachable (the rest wait for the next round).

        With `wait=False` the reports go out on sender threads and the loop goes on to start
        the next job; their outcomes are taken in at a later flush, which the senders wake
        the loop for (senders.py)."""
        if self.node_id is None:
            return
        if wait:
            self.senders.wait()
        # What failed stops this flush before anything new is sent (the round backs off).
        self._take_in(self.senders.finished())
        self.senders.start(list(self.work.due_reports()))
        if wait:
            self.senders.wait()
            self._take_in(self.senders.finished())
        self.work.tick()

    def _take_in(self, outcomes: list[Outcome]) -> None:
        ended = False
        failure: Exception | None = None
        for report, exc in outcomes:
            if isinstance(exc, NotFound):
                log.info("%s %s is unknown to the control plane; forgetting it", *_what(report))
                self.work.forget(report)
                continue
            if isinstance(exc, Rejected):
                # Sending the same body again would be refused again.
                log.warning("control plane refused a report on %s %s: %s", *_what(report), exc)
            elif exc is not None:
                failure = failure or exc  # not sent: it stays due
                continue
            report.sent()
            ended = ended or _ends_task(report)
        if failure is not None:
            raise failure
        if ended and self.watch is None:
            # The exit freed GPUs that the server may have handed on already, perhaps to
            # this node: without a long poll, ask now rather than at the next heartbeat.
            self.fetch_work()

    def _send(self, report: Report) -> None:
        assert self.node_id is not None
        body = report.body
        if isinstance(body, WarmupReport):
            if report.kind == HOLD_WARMUP:
                self.client.report_warmup(self.node_id, report.target, body)
            else:
                self.client.report_allocation_warmup(self.node_id, report.target, body)
        else:
            self.client.report_task(self.node_id, report.target, body)

    def round(self) -> float:
        """One heartbeat round; returns the seconds to wait before the next one."""
        try:
            self.beat()
            self.flush()
        except (Unreachable, Rejected, NotFound) as exc:
            # Register again once it answers: it may have restarted on another database. A
            # 404 here came after registering again (a node deleted as it registered, or a
            # replica behind a load balancer on another database): back off, never crash.
            self.registered = False
            delay = self.backoff.next()
            what = (
                "unreachable"
                if isinstance(exc, Unreachable)
                else "does not know this node"
                if isinstance(exc, NotFound)
                else "refused the request"
            )
            log.warning(
                "control plane %s (%s); retrying in %.1fs (attempt %d)",
                what,
                exc,
                delay,
                self.backoff.failures,
            )
            return delay
        if self.backoff.failures:
            log.info(
                "reconnected to the control plane after %d failed attempt(s)",
                self.backoff.failures,
            )
            self.backoff.reset()
        return self.cfg.heartbeat_interval_s

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        orphans = self.registry.stop_orphans()
        if orphans:
            log.warning("stopped %d process group(s) left by a previous agent", len(orphans))
        next_round = self.clock()
        watcher = None
        if self.watch is not None:
            watcher = threading.Thread(target=self._watch_loop, name="work-poll", daemon=True)
            watcher.start()
        try:
            while not self.stopping.is_set():
                self._apply_pushed()
                if self.clock() >= next_round:
                    next_round = self.clock() + self.round()
                elif self.registered:
                    # A failure here is left to the next round, which reports it and backs off.
                    with contextlib.suppress(ApiError):
                        self.flush(wait=False)
                else:
                    self.work.tick()
                if not self.stopping.is_set():
                    self._wait(max(0.0, next_round - self.clock()))
        except Refused as exc:
            log.error(
                "the control plane refused this node's credential (%s): give it a new "
                "enrolment token (JITGPU_ENROL_TOKEN, from jitgpu admin node-token create)",
                exc,
            )
            self.shutdown(report=False)
            return EXIT_REFUSED
        self.shutdown(report=True)
        return EXIT_OK

    def shutdown(self, *, report: bool = True) -> None:
        """Stop warm-ups and tasks (their process groups), report them, and report a drain."""
        if self.work.busy():
            log.info("stopping warm-ups and tasks")
        self.work.stop_all(self.cfg.tasks.stop_grace_s)
        if report and self.registered and self.node_id is not None:
            try:
                self.flush()
                self.client.heartbeat(self.node_id, self.heartbeat_body(draining=True))
                log.info("reported drain to the control plane")
            except ApiError as exc:
                log.warning("could not report the drain: %s", exc)
        self.senders.close()
        self.backend.close()
        log.info("node agent stopped")


def _ends_task(report: Report) -> bool:
    body = report.body
    return isinstance(body, TaskReport) and body.status in FINAL_TASK_STATUSES


def _what(report: Report) -> tuple[str, str]:
    return ("hold" if report.kind == HOLD_WARMUP else "allocation", report.target)
