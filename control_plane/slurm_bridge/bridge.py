"""The Slurm backend: jitgpu holds become MAGNETIC reservations and powered-up nodes.

One `step(now)` reads Slurm (nodes, jobs, `jitgpu-*` reservations), heartbeats every GPU
node to the control plane, and makes Slurm match the holds it is asked to keep. Each step
is idempotent: run twice, it does nothing the second time; restarted, it adopts its
reservations by name prefix and (with a state file) never re-creates one an admin deleted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from control_plane.node_agent.client import ApiError, ControlPlane, NotFound, Refused
from control_plane.node_agent.identity import CredentialStore
from control_plane.schemas.backends import BackendEvent, BackendEventKind, BackendEventReply
from control_plane.schemas.nodes import (
    GpuSpec,
    Heartbeat,
    NodeAssignment,
    NodeRegister,
    TaskReport,
    WarmupReport,
)
from control_plane.slurm_bridge.config import BridgeConfig
from control_plane.slurm_bridge.slurm import Slurm, SlurmError, SlurmJob, SlurmNode
from control_plane.slurm_bridge.telemetry import gpu_report, gpu_uuids

log = logging.getLogger("jitgpu.slurm_bridge")

KEEP = ("placed", "warming", "ready")  # hold states the bridge keeps a reservation for
VERSION = "jitgpu-slurm-bridge"


class BridgeClient(ControlPlane):
    """The node agent's client plus the backend-event report."""

    def report_backend_event(
        self, node_id: str, hold_id: str, body: BackendEvent
    ) -> BackendEventReply:
        path = f"/v1/nodes/{node_id}/holds/{hold_id}/backend-event"
        return self._post(path, body, BackendEventReply)


@dataclass
class Claim:
    hold_id: str
    job_id: str
    node: str
    allocation_id: str | None = None
    time_to_gpu_s: float | None = None


@dataclass
class State:
    reserved: set[str] = field(default_factory=set)  # holds whose reservation we made/adopted
    claims: dict[str, Claim] = field(default_factory=dict)  # by hold id
    powered_at: dict[str, float] = field(default_factory=dict)  # node -> our power-up time
    resume_latency_s: float | None = None  # measured boot time of a powered-down node


class Bridge:
    """`client` enrols nodes; each Slurm node then acts with its own node credential."""

    def __init__(self, cfg: BridgeConfig, slurm: Slurm, client: BridgeClient) -> None:
        self.cfg = cfg
        self.slurm = slurm
        self.client = client
        self.clients: dict[str, BridgeClient] = {}  # Slurm node -> its credential's client
        self.node_ids: dict[str, str] = {}
        # GPUs jitgpu has given out per node (last heartbeat), to (kind, hold or allocation
        # id): a Slurm job on them is ours.
        self.assigned: dict[str, dict[str, tuple[str, str]]] = {}
        self.state = self._load()

    # -- state ----------------------------------------------------------------------------

    def _load(self) -> State:
        path = self.cfg.state_file
        if path is None or not path.exists():
            return State()
        data = json.loads(path.read_text())
        return State(
            reserved=set(data.get("reserved", [])),
            claims={k: Claim(**v) for k, v in data.get("claims", {}).items()},
            resume_latency_s=data.get("resume_latency_s"),
        )

    def _save(self) -> None:
        path = self.cfg.state_file
        if path is None:
            return
        data = {
            "reserved": sorted(self.state.reserved),
            "claims": {k: vars(v) for k, v in self.state.claims.items()},
            "resume_latency_s": self.state.resume_latency_s,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    @property
    def resume_latency_s(self) -> float:
        measured = self.state.resume_latency_s
        return self.cfg.resume_latency_s if measured is None else measured

    def reservation(self, hold_id: str) -> str:
        return f"{self.cfg.reservation_prefix}{hold_id}"

    # -- the loop -------------------------------------------------------------------------

    def adopt(self) -> list[str]:
        """At start: every reservation with our prefix is ours (made before a restart)."""
        names = self.slurm.reservations(self.cfg.reservation_prefix)
        adopted = [n[len(self.cfg.reservation_prefix) :] for n in names]
        self.state.reserved.update(adopted)
        self._save()
        return adopted

    def step(self, now: float) -> None:
        nodes = {n.name: n for n in self.slurm.nodes() if self._ours(n)}
        jobs = self.slurm.jobs()
        reservations = self.slurm.reservations(self.cfg.reservation_prefix)
        # Reservations a job runs in: the GPUs of their holds are that job's, not outsiders'.
        occupied = {j.reservation for j in jobs if j.state == "RUNNING" and j.reservation}
        holds: dict[str, tuple[SlurmNode, NodeAssignment]] = {}
        allocations: dict[str, tuple[SlurmNode, NodeAssignment]] = {}
        for node in list(nodes.values()):
            try:
                assignments = self._heartbeat(node, occupied)
            except Refused as exc:
                # One node the bridge may not act as (no enrolment token): serve the others.
                log.warning("node %s not served: %s", node.name, exc)
                del nodes[node.name]
                continue
            for a in assignments:
                target = holds if a.kind == "hold" else allocations
                target.setdefault(a.id, (node, a))
        for node, a in holds.values():
            if a.status in KEEP:
                self._keep(now, node, a, reservations, jobs)
        self._release_others(holds, allocations, reservations, jobs)
        self._end_finished_jobs(allocations, jobs)
        self._save()

    def _ours(self, node: SlurmNode) -> bool:
        if node.gpus <= 0:
            return False
        wanted = self.cfg.partitions
        return wanted is None or bool(set(node.partitions) & set(wanted))

    def _heartbeat(self, node: SlurmNode, occupied: set[str]) -> list[NodeAssignment]:
        if node.name not in self.node_ids:
            self._register(node)
        mine = self.assigned.get(node.name, {})
        prefix = self.cfg.reservation_prefix
        body = Heartbeat(gpus=gpu_report(node, mine, occupied, prefix))
        client = self.clients[node.name]
        try:
            reply = client.heartbeat(self.node_ids[node.name], body)
        except NotFound:
            # The control plane forgot the node (a fresh database): register it again.
            self._register(node)
            reply = client.heartbeat(self.node_ids[node.name], body)
        self.assigned[node.name] = {
            uuid: (a.kind, a.id) for a in reply.assignments for uuid in a.gpu_uuids
        }
        if reply.rotate_credential:
            self._rotate(node.name)
        return reply.assignments

    def _rotate(self, name: str) -> None:
        """The control plane asked this node for a new credential: get it, keep it, use it."""
        issued = self.clients[name].rotate(self.node_ids[name])
        folder = self.cfg.credentials_dir
        if folder is not None:
            try:
                CredentialStore.for_node(folder, name).save(issued, server=self.client.server)
            except OSError as exc:
                # The old credential is already void: go on with the new one in memory.
                log.error("could not store Slurm node %s's rotated credential: %s", name, exc)
        self.clients[name].set_token(issued.credential)
        log.info("rotated Slurm node %s's credential (now %s...)", name, issued.prefix)

    def _register(self, node: SlurmNode) -> None:
        gpus = [
            GpuSpec(uuid=uuid, model=self.cfg.gpu_model, memory_mb=self.cfg.gpu_memory_mb, index=i)
            for i, uuid in enumerate(gpu_uuids(node))
        ]
        leaf = node.partitions[0] if node.partitions else "leaf0"
        client = self.clients.get(node.name) or self._enrol(node.name)
        registered = client.register(
            NodeRegister(name=node.name, leaf=leaf, gpus=gpus, agent_version=VERSION)
        )
        self.node_ids[node.name] = registered.id

    def _enrol(self, name: str) -> BridgeClient:
        """The node's stored credential, or one enrolment (its enrolment token, else `token`)."""
        folder = self.cfg.credentials_dir
        store = CredentialStore.for_node(folder, name) if folder is not None else None
        stored = store.load() if store is not None else None
        if stored is not None:
            credential = stored.credential
        else:
            token = self.cfg.enrol_tokens.get(name) or self.cfg.token
            if not token:
                raise Refused(f"no enrolment token for Slurm node {name} (enrol_tokens)")
            issued = self.client.enrol(name, token)
            if store is not None:
                store.save(issued, server=self.client.server)
            credential = issued.credential
            log.info("enrolled Slurm node %s as %s", name, issued.node_id)
        client = BridgeClient(self.client.server, credential, http=self.client.http)
        self.clients[name] = client
        return client

    # -- keep, warm, claim ----------------------------------------------------------------

    def _keep(
        self,
        now: float,
        node: SlurmNode,
        a: NodeAssignment,
        reservations: dict,
        jobs: list[SlurmJob],
    ) -> None:
        name = self.reservation(a.id)
        if name not in reservations:
            if a.expires_at is not None and a.expires_at.timestamp() <= now + self.cfg.poll_s:
                return  # Slurm ended it at the hold's own expiry, a moment before jitgpu did
            if a.id in self.state.reserved:
                # Ours, and gone while the hold is active: an admin deleted it. End the hold;
                # never make it again.
                self.state.reserved.discard(a.id)
                self._event(node, a.id, BackendEventKind.ENDED, f"reservation {name} deleted")
                return
            account = self.cfg.account_for(a.tenant)
            if account is None:
                reason = f"no Slurm user or account configured for tenant {a.tenant!r}"
                self._event(node, a.id, BackendEventKind.FAILED, reason)
                return
            end = a.expires_at or datetime.fromtimestamp(now + 3600, tz=UTC)
            try:
                self.slurm.create_reservation(
                    name, nodes=[node.name], end=end, users=account.users, accounts=account.account
                )
            except SlurmError as exc:
                log.warning("reservation %s not made: %s", name, exc)
                return
            self.state.reserved.add(a.id)
            log.info("reserved %s on %s for %s until %s", name, node.name, a.tenant, end)
        job = next((j for j in jobs if j.reservation == name and j.state == "RUNNING"), None)
        if job is not None:
            self._claimed(node, a, job)
            return
        self._warm(now, node, a)

    def _warm(self, now: float, node: SlurmNode, a: NodeAssignment) -> None:
        start = a.start_at.timestamp() if a.start_at else now
        if node.powered_down and not node.powering_up:
            if now < start - self.resume_latency_s:
                return  # not yet: the node would sit idle, powered, until start_at
            try:
                self.slurm.power_up(node.name)
            except SlurmError as exc:
                log.warning("power-up of %s refused: %s", node.name, exc)
                return
            self.state.powered_at.setdefault(node.name, now)
            log.info("powering up %s for %s (start in %.0fs)", node.name, a.id, start - now)
            if a.status == "placed" and a.warmup:
                self._warmup_report(node, a, WarmupReport(ok=True, warmup_s=0, started=True))
        elif node.usable:
            began = self.state.powered_at.pop(node.name, None)
            took = 0.0 if began is None else max(0.0, now - began)
            if began is not None:
                self.state.resume_latency_s = took
                log.info("%s booted in %.1fs", node.name, took)
            if a.status in ("placed", "warming") and a.warmup:
                self._warmup_report(node, a, WarmupReport(ok=True, warmup_s=took))
        elif node.failed and a.status in KEEP:
            self.state.powered_at.pop(node.name, None)
            reason = f"node {node.name} is {node.state}"
            self._event(node, a.id, BackendEventKind.FAILED, reason)

    def _claimed(self, node: SlurmNode, a: NodeAssignment, job: SlurmJob) -> None:
        body = BackendEvent(
            kind=BackendEventKind.CLAIMED,
            job_id=job.job_id,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
        )
        reply = self._event_body(node, a.id, body)
        claim = Claim(hold_id=a.id, job_id=job.job_id, node=node.name)
        if reply is not None and reply.allocation is not None:
            claim.allocation_id = reply.allocation.id
            claim.time_to_gpu_s = reply.allocation.time_to_gpu_s
        self.state.claims[a.id] = claim
        log.info("hold %s claimed by job %s (ttg %s s)", a.id, job.job_id, claim.time_to_gpu_s)
        # The job runs; the rest of the window is given back to everyone.
        self._end(self.reservation(a.id))

    # -- release --------------------------------------------------------------------------

    def _release_others(
        self,
        holds: dict[str, tuple[SlurmNode, NodeAssignment]],
        allocations: dict[str, tuple[SlurmNode, NodeAssignment]],
        reservations: dict,
        jobs: list,
    ) -> None:
        """Reservations of holds no longer kept (expired, cancelled, claimed) end now; but
        one claimed through jitgpu (the agent saw the job pending) waits for its job."""
        keep = {self.reservation(h) for h, (_, a) in holds.items() if a.status in KEEP}
        busy = {j.reservation for j in jobs if j.state == "RUNNING"}
        claimed = {a.hold_id for _, a in allocations.values() if a.hold_id}
        for name in reservations:
            if name in keep:
                continue
            hold_id = name[len(self.cfg.reservation_prefix) :]
            if hold_id in claimed and name not in busy and hold_id not in self.state.claims:
                # The claiming job has not started yet: ended now, the reservation would
                # let another job take the booted node first. It ends when the job runs in
                # it, or at the hold's own expiry (its EndTime).
                continue
            if name not in busy or hold_id not in self.state.claims:
                self._end(name)
            self.state.reserved.discard(hold_id)

    def _end_finished_jobs(
        self, allocations: dict[str, tuple[SlurmNode, NodeAssignment]], jobs: list[SlurmJob]
    ) -> None:
        """A claimed hold's job left the queue: its allocation is released."""
        running = {j.job_id for j in jobs}
        for hold_id, claim in list(self.state.claims.items()):
            if claim.job_id in running:
                continue
            alloc = allocations.get(claim.allocation_id or "")
            if alloc is not None:
                node_id = self.node_ids[alloc[0].name]
                try:
                    self.clients[alloc[0].name].report_task(
                        node_id, alloc[1].id, TaskReport(status="exited", exit_code=None)
                    )
                except ApiError as exc:
                    log.warning("release of %s not reported: %s", alloc[1].id, exc)
                    continue
            del self.state.claims[hold_id]

    def _end(self, name: str) -> None:
        try:
            self.slurm.end_reservation(name)
            log.info("ended reservation %s", name)
        except SlurmError as exc:
            log.warning("reservation %s not ended: %s", name, exc)

    # -- reports --------------------------------------------------------------------------

    def _event(self, node: SlurmNode, hold_id: str, kind: BackendEventKind, reason: str) -> None:
        log.info("hold %s %s: %s", hold_id, kind.value, reason)
        self._event_body(node, hold_id, BackendEvent(kind=kind, reason=reason))

    def _event_body(
        self, node: SlurmNode, hold_id: str, body: BackendEvent
    ) -> BackendEventReply | None:
        try:
            client = self.clients[node.name]
            return client.report_backend_event(self.node_ids[node.name], hold_id, body)
        except ApiError as exc:
            log.warning("event %s for %s not reported: %s", body.kind.value, hold_id, exc)
            return None

    def _warmup_report(self, node: SlurmNode, a: NodeAssignment, body: WarmupReport) -> None:
        try:
            self.clients[node.name].report_warmup(self.node_ids[node.name], a.id, body)
        except ApiError as exc:
            log.warning("warm-up of %s not reported: %s", a.id, exc)
