"""The agent's loop against a scripted control plane: backoff, reconnect, resend, claims."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from control_plane.node_agent.agent import Agent
from control_plane.node_agent.client import Backoff, NotFound, Refused, Unreachable
from control_plane.node_agent.simulated import SimulatedBackend
from control_plane.schemas.enums import NodeStatus
from control_plane.schemas.nodes import HeartbeatReply, Node, NodeAssignment, NodeWork
from tests.node_agent.helpers import base_env, make_config
from tests.support.procs import wait_for

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class ScriptedControlPlane:
    """Answers with `assignments`; `failures` makes the next calls of a kind raise."""

    def __init__(self) -> None:
        self.assignments: list[NodeAssignment] = []
        self.failures: dict[str, list[Exception]] = {}
        self.calls: list[tuple[str, Any]] = []

    def _maybe_fail(self, kind: str) -> None:
        queue = self.failures.get(kind)
        if queue:
            raise queue.pop(0)

    def register(self, body: Any) -> Node:
        self._maybe_fail("register")
        self.calls.append(("register", body))
        return Node(
            id="node_1",
            name=body.name,
            spine=body.spine,
            leaf=body.leaf,
            status=NodeStatus.ONLINE,
            registered_at=NOW,
            last_heartbeat_at=NOW,
            gpus=[],
        )

    def heartbeat(self, node_id: str, body: Any) -> HeartbeatReply:
        self._maybe_fail("heartbeat")
        self.calls.append(("heartbeat", body))
        status = NodeStatus.DRAINING if body.draining else NodeStatus.ONLINE
        return HeartbeatReply(node_id=node_id, status=status, assignments=list(self.assignments))

    def work(self, node_id: str, *, since: str | None = None, wait_s: float = 0.0) -> NodeWork:
        self._maybe_fail("work")
        self.calls.append(("work", since))
        return NodeWork(
            node_id=node_id,
            status=NodeStatus.ONLINE,
            assignments=list(self.assignments),
            version=f"v{len(self.calls)}",
        )

    def report_warmup(self, node_id: str, hold_id: str, body: Any) -> None:
        self._maybe_fail("warmup")
        self.calls.append(("warmup", (hold_id, body)))
        # Like the server: started -> warming, ok -> ready, failed -> gone.
        status = "warming" if body.started else "ready" if body.ok else None
        self._update(hold_id, status=status)

    def report_allocation_warmup(self, node_id: str, alloc_id: str, body: Any) -> None:
        self._maybe_fail("allocation-warmup")
        self.calls.append(("allocation-warmup", (alloc_id, body)))
        self._update(alloc_id, warmup=None)  # usable from now: nothing more to warm

    def report_task(self, node_id: str, alloc_id: str, body: Any) -> None:
        self._maybe_fail("task")
        self.calls.append(("task", (alloc_id, body)))
        final = body.status.value in ("exited", "failed", "stopped")
        self._update(alloc_id, task_status=None if final else body.status.value, keep=not final)

    def _update(self, target: str, *, keep: bool = True, **changes: Any) -> None:
        out = []
        for a in self.assignments:
            if a.id == target:
                if not keep or changes.get("status", "") is None:
                    continue
                a = a.model_copy(update=changes)
            out.append(a)
        self.assignments = out

    def sent(self, kind: str) -> list[Any]:
        return [payload for k, payload in self.calls if k == kind]


class FakeTime:
    """The loop's clock and wait: waiting advances the clock; `on_wait` may stop the loop."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.on_wait: Callable[[int], None] = lambda n: None

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        self.on_wait(len(self.waits))


def make(
    tmp_path: Path, cp: ScriptedControlPlane, time: FakeTime | None = None, **cfg: Any
) -> Agent:
    config = make_config(tmp_path, backoff={"initial_s": 0.5, "max_s": 3}, **cfg)
    backend = SimulatedBackend(node="n1", count=2, model="A100", memory_mb=1, env={})
    kw: dict[str, Any] = {}
    if time is not None:
        kw = {"clock": time.clock, "wait": time.wait}
    agent = Agent(config, backend, cp, name="n1", rng=lambda: 1.0, env=base_env(), **kw)  # type: ignore[arg-type]
    return agent


def hold(
    hold_id: str, gpus: list[str], status: str = "placed", warmup: str | None = "w"
) -> NodeAssignment:
    return NodeAssignment(kind="hold", id=hold_id, status=status, gpu_uuids=gpus, warmup=warmup)


def alloc(
    alloc_id: str,
    gpus: list[str],
    command: list[str] | None,
    task_status: str | None = None,
    warmup: str | None = None,
) -> NodeAssignment:
    return NodeAssignment(
        kind="allocation",
        id=alloc_id,
        status="allocated",
        gpu_uuids=gpus,
        command=command,
        task_status=task_status,
        warmup=warmup,
    )


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    draws = iter([0.0, 1.0, 0.0, 1.0, 0.5])
    b = Backoff(0.5, 3.0, 2.0, rng=lambda: next(draws))
    assert [b.next() for _ in range(5)] == [0.25, 1.0, 1.0, 3.0, 2.25]
    b.reset()
    assert b.failures == 0
    b.rng = lambda: 1.0
    for _ in range(2000):  # a long outage never overflows
        assert b.next() <= 3.0


def test_loop_backs_off_while_down_then_registers_again(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    time = FakeTime()
    agent = make(tmp_path, cp, time)
    down = [Unreachable("connection refused") for _ in range(4)]
    cp.failures["heartbeat"] = list(down)

    def stop_after(n: int) -> None:
        if n == 7:
            agent.request_stop()

    time.on_wait = stop_after
    assert agent.run() == 0
    # rng=1.0: the full step each time, doubling from 0.5, capped at 3; then the interval.
    assert time.waits[:6] == [0.5, 1.0, 2.0, 3.0, 0.5, 0.5]
    registers = [c for c in cp.calls if c[0] == "register"]
    # Registered at start, then again after every failed round (the server may have restarted).
    assert len(registers) == 5
    assert agent.backoff.failures == 0
    assert cp.sent("heartbeat")[-1].draining is True


def test_a_refused_token_ends_the_agent_with_status_3(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    cp.failures["register"] = [Refused("HTTP 401: invalid token", 401)]
    assert make(tmp_path, cp, FakeTime()).run() == 3


def test_heartbeat_sampling_failure_still_sends_a_heartbeat(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp)

    def broken() -> list[Any]:
        raise RuntimeError("driver hiccup")

    agent.backend.sample = broken  # type: ignore[method-assign]
    agent.round()
    assert cp.sent("heartbeat")[0].gpus == []


def test_a_final_report_that_fails_is_sent_again(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp, warmup_profiles={"w": [{"command": "true"}]})
    cp.assignments = [hold("h1", ["GPU-a"])]
    cp.failures["warmup"] = [Unreachable("timeout")]  # the "started" report is lost
    agent.round()
    assert agent.backoff.failures == 1  # the report failed: the loop backs off
    agent.work.holds["h1"].warmup.join(10)  # type: ignore[union-attr]
    agent.round()
    reports = [body for _, body in cp.sent("warmup")]
    assert [r.ok for r in reports] == [True] and not reports[0].started
    assert agent.work.holds["h1"].final_sent
    agent.round()
    assert len(cp.sent("warmup")) == 1  # nothing more once acknowledged


def test_a_hold_placed_again_after_ready_is_warmed_again(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp, warmup_profiles={"w": [{"command": "true"}]})
    cp.assignments = [hold("h1", ["GPU-a"])]
    agent.round()
    first = agent.work.holds["h1"].warmup
    first.join(10)  # type: ignore[union-attr]
    agent.flush()
    cp.assignments = [hold("h1", ["GPU-a"], status="ready")]
    agent.round()
    assert agent.work.holds["h1"].warmup is first
    cp.assignments = [hold("h1", ["GPU-b"], status="placed")]  # re-placed elsewhere
    agent.round()
    second = agent.work.holds["h1"].warmup
    assert second is not first and second.gpu_uuids == ["GPU-b"]  # type: ignore[union-attr]


def test_claim_mid_warm_up_lets_it_finish_before_the_task_starts(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    cp = ScriptedControlPlane()
    agent = make(
        tmp_path,
        cp,
        warmup_profiles={"w": [{"command": f"while [ ! -e {flag} ]; do sleep 0.02; done"}]},
    )
    cp.assignments = [hold("h1", ["GPU-a", "GPU-b"])]
    agent.round()
    cp.assignments = [alloc("a1", ["GPU-a", "GPU-b"], ["sh", "-c", "echo task"])]
    agent.round()
    local = agent.work.holds["h1"]
    assert local.claimed and local.warming
    assert agent.work.allocations["a1"].task is None
    assert [b.status.value for _, b in cp.sent("task")] == ["starting"]
    flag.touch()
    local.warmup.join(10)  # type: ignore[union-attr]
    agent.flush()
    assert [b.ok for _, b in cp.sent("warmup")][-1] is True  # the server marks the claim warm
    assert "h1" not in agent.work.holds
    task = agent.work.allocations["a1"].task
    assert task is not None
    task.join(10)
    agent.flush()
    statuses = [b.status.value for _, b in cp.sent("task")]
    assert statuses[0] == "starting" and statuses[-1] == "exited"


def test_a_hold_that_ends_mid_warm_up_stops_it_silently(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp, warmup_profiles={"w": [{"command": "exec sleep 60"}]})
    cp.assignments = [hold("h1", ["GPU-a"])]
    agent.round()
    warmup = agent.work.holds["h1"].warmup
    wait_for(lambda: warmup._child is not None, timeout=5, what="the warm-up to start")  # type: ignore[union-attr]
    cp.assignments = []  # cancelled or expired
    agent.round()
    warmup.join(10)  # type: ignore[union-attr]
    assert warmup.result is not None and warmup.result.cancelled  # type: ignore[union-attr]
    agent.flush()
    assert [b.started for _, b in cp.sent("warmup")] == [True]  # no failure reported


def test_a_report_on_something_the_server_forgot_is_dropped(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp)
    cp.assignments = [alloc("a1", ["GPU-a"], ["true"])]
    cp.failures["task"] = [NotFound("allocation a1 not found on node node_1", 404)]
    agent.round()
    assert "a1" not in agent.work.allocations


def test_tasks_can_be_disabled(tmp_path: Path) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp, tasks={"enabled": False})
    cp.assignments = [alloc("a1", ["GPU-a"], ["true"])]
    agent.round()
    ((_, body),) = cp.sent("task")
    assert body.status.value == "failed" and "tasks.enabled" in body.output_tail


def test_running_task_streams_its_output_tail(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    cp = ScriptedControlPlane()
    time = FakeTime()
    agent = make(tmp_path, cp, time, tasks={"output_report_interval_s": 5})
    script = f"echo step 1; while [ ! -e {flag} ]; do sleep 0.02; done; echo step 2"
    cp.assignments = [alloc("a1", ["GPU-a"], ["sh", "-c", script])]
    agent.round()
    task = agent.work.allocations["a1"].task
    assert task is not None
    wait_for(lambda: "step 1" in task.tail.text(), timeout=5, what="first output")
    agent.flush()
    time.now += 5
    agent.flush()
    tails = [b.output_tail for _, b in cp.sent("task")]
    assert tails[-1] == "step 1\n"
    flag.touch()
    task.join(10)
    agent.flush()
    last = cp.sent("task")[-1][1]
    assert last.status.value == "exited" and last.output_tail == "step 1\nstep 2\n"


@pytest.mark.parametrize("already", ["exited", "failed"])
def test_finished_tasks_are_not_run_again(tmp_path: Path, already: str) -> None:
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp)
    cp.assignments = [alloc("a1", ["GPU-a"], ["true"], task_status=already)]
    agent.round()
    assert agent.work.allocations["a1"].task is None and cp.sent("task") == []


def test_allocation_cold_start_is_reported_again_until_it_arrives(tmp_path: Path) -> None:
    out, flag = tmp_path / "env", tmp_path / "go"
    script = f"env > {out}; while [ ! -e {flag} ]; do sleep 0.02; done"
    cp = ScriptedControlPlane()
    agent = make(tmp_path, cp, warmup_profiles={"w": [{"command": script}]})
    cp.assignments = [alloc("a1", ["GPU-a"], None, warmup="w")]
    cp.failures["allocation-warmup"] = [Unreachable("timeout")]
    agent.round()
    warmup = agent.work.allocations["a1"].warmup
    assert warmup is not None
    flag.touch()
    warmup.join(10)
    with pytest.raises(Unreachable):
        agent.flush()
    agent.round()
    ((target, body),) = cp.sent("allocation-warmup")
    assert target == "a1" and body.ok and not body.started
    assert "JITGPU_ALLOCATION_ID=a1" in out.read_text().splitlines()
    agent.round()
    assert len(cp.sent("allocation-warmup")) == 1
    assert agent.work.allocations["a1"].warmup is warmup  # not warmed twice


def test_a_second_404_after_registering_again_backs_off_instead_of_crashing(
    tmp_path: Path,
) -> None:
    cp = ScriptedControlPlane()
    time = FakeTime()
    agent = make(tmp_path, cp, time)
    gone = NotFound("node node_1 not found", 404)
    cp.failures["heartbeat"] = [gone, gone, gone, gone]

    def stop_after(n: int) -> None:
        if n == 3:
            agent.request_stop()

    time.on_wait = stop_after
    assert agent.run() == 0
    # Two rounds met a 404 on the retry too: each backed off; the third got through.
    assert time.waits[:3] == [0.5, 1.0, 0.5]
    assert len(cp.sent("register")) == 5  # start, retry, next round, retry, third round
    assert agent.registered and agent.backoff.failures == 0


def test_a_reply_older_than_one_applied_is_dropped(tmp_path: Path) -> None:
    """A heartbeat and a long poll may cross: the older desired state must not undo the newer."""
    agent = make(tmp_path, ScriptedControlPlane())
    agent.register()
    gpu = agent.discovery.gpus[0].uuid
    newer = HeartbeatReply(
        node_id="node_1",
        status=NodeStatus.ONLINE,
        assignments=[hold("hold_a", [gpu], status="ready", warmup=None)],
        epoch=7,
    )
    older = HeartbeatReply(node_id="node_1", status=NodeStatus.ONLINE, assignments=[], epoch=6)
    agent.apply(newer)
    agent.apply(older)
    assert list(agent.work.holds) == ["hold_a"]
    # The same epoch is the same assignments; a later one applies.
    agent.apply(newer.model_copy(update={"epoch": 8, "assignments": []}))
    assert list(agent.work.holds) == []
    # A new registration (perhaps a new database, its epochs from 1 again) starts over.
    agent.register()
    agent.apply(newer.model_copy(update={"epoch": 1}))
    assert list(agent.work.holds) == ["hold_a"]


class GatedControlPlane(ScriptedControlPlane):
    """Task reports wait at a gate: what the loop does while the control plane is slow."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.arrived = threading.Semaphore(0)

    def report_task(self, node_id: str, alloc_id: str, body: Any) -> None:
        self.arrived.release()
        assert self.gate.wait(10), "the test never opened the gate"
        super().report_task(node_id, alloc_id, body)


def _two_exited(tmp_path: Path, cp: ScriptedControlPlane) -> Agent:
    """An agent whose two allocations' tasks ran and exited, their reports not yet sent."""
    agent = make(tmp_path, cp)
    cp.assignments = [alloc("a1", ["GPU-a"], ["true"]), alloc("a2", ["GPU-b"], ["true"])]
    agent.apply(cp.heartbeat("node_1", agent.heartbeat_body()))
    agent.node_id = "node_1"
    for local in agent.work.allocations.values():
        assert local.task is not None
        local.task.join(10)
    return agent


def test_reports_go_out_off_the_loop_side_by_side_and_are_taken_in_later(
    tmp_path: Path,
) -> None:
    cp = GatedControlPlane()
    agent = _two_exited(tmp_path, cp)
    # The loop's flush does not wait for the answers: both reports are in flight at once.
    agent.flush(wait=False)
    assert cp.arrived.acquire(timeout=10) and cp.arrived.acquire(timeout=10)
    assert all(a.sent_status is None for a in agent.work.allocations.values())
    # A target with a report in flight is not sent again.
    agent.flush(wait=False)
    cp.gate.set()
    wait_for(lambda: len(cp.sent("task")) == 2, timeout=10, what="both reports answered")
    agent.flush()  # takes the outcomes in
    assert {a for a, _ in cp.sent("task")} == {"a1", "a2"}
    assert all(b.status.value == "exited" for _, b in cp.sent("task"))
    agent.flush()
    assert len(cp.sent("task")) == 2  # acknowledged: never sent again


def test_a_report_that_failed_off_the_loop_fails_the_next_flush_and_is_sent_again(
    tmp_path: Path,
) -> None:
    cp = ScriptedControlPlane()
    agent = _two_exited(tmp_path, cp)
    cp.failures["task"] = [Unreachable("timeout")]
    agent.flush(wait=False)
    agent.senders.wait()  # both sends answered, one of them with the failure
    with pytest.raises(Unreachable):
        agent.flush(wait=False)  # the failure reaches the loop, which backs off
    agent.flush()
    assert sorted(a for a, _ in cp.sent("task")) == ["a1", "a2"]
    assert cp.assignments == []  # both final reports arrived
