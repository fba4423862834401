"""The agent against the real app when work moves away, the node is drained, or nothing changes."""

from __future__ import annotations

from pathlib import Path

from control_plane.jobs.registry import liveness
from tests.node_agent.conftest import ADMIN, AgentFactory, ControlPlaneApp
from tests.support.state import assignment_state


def _liveness(cp: ControlPlaneApp) -> int:
    state = cp.http.app.state  # type: ignore[attr-defined]
    return liveness(state.writer, state.settings, cp.clock.now)


def test_a_late_report_on_a_hold_that_moved_away_is_refused_and_forgotten(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    profile = {
        "warmup_profiles": {"w": [{"command": f"until [ -e {flag} ]; do sleep 0.02; done; exit 3"}]}
    }
    old = make_agent("node-1", gpus=2, **profile)
    old.round()
    hold = cp.hold(gpu_count=2, warmup="w")
    old.round()  # warming on node-1
    assert cp.get(f"/v1/holds/{hold['id']}")["status"] == "warming"
    # node-1 falls silent; its hold moves to node-2.
    cp.clock.advance(20)
    new = make_agent("node-2", gpus=2, **profile)
    new.round()
    assert _liveness(cp) == 1
    moved = cp.get(f"/v1/holds/{hold['id']}")
    assert moved["status"] == "placed" and {g["node"] for g in moved["gpus"]} == {"node-2"}
    # node-1's warm-up now fails: its report must not fail the hold on node-2.
    flag.touch()
    warmup = old.work.holds[hold["id"]].warmup
    assert warmup is not None
    warmup.join(10)
    old.flush()
    assert hold["id"] not in old.work.holds
    after = cp.get(f"/v1/holds/{hold['id']}")
    assert after["status"] == "placed" and after["gpus"] == moved["gpus"]


def test_an_agent_that_lost_its_local_work_changes_nothing_by_heartbeating(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent("node-1", gpus=3)
    agent.round()
    hold = cp.hold(gpu_count=1)
    r = cp.http.post("/v1/allocations", json={"gpu_count": 2}, headers=cp.tenant)
    assert r.status_code == 201, r.text
    before = assignment_state(cp.http.app.state.db)
    assert hold["status"] == "ready"
    agent.work.holds.clear()  # as if it forgot everything it ran
    agent.work.allocations.clear()
    for _ in range(2):
        cp.clock.advance(1)
        agent.beat()
        agent.flush()
    assert assignment_state(cp.http.app.state.db) == before
    assert set(agent.work.holds) == {hold["id"]} and len(agent.work.allocations) == 1


def test_a_drain_from_the_control_plane_reaches_the_agent_and_keeps_its_work(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent("node-1", gpus=2)
    agent.round()
    hold = cp.hold(gpu_count=1)
    agent.round()
    node_id = agent.node_id
    r = cp.http.post(f"/v1/nodes/{node_id}/drain", headers=ADMIN)
    assert r.status_code == 200, r.text
    for _ in range(2):  # its own heartbeats (not draining) leave the drain in place
        cp.clock.advance(1)
        assert agent.round() == agent.cfg.heartbeat_interval_s
        assert agent.status == cp.node("node-1")["status"] == "draining"
    assert set(agent.work.holds) == {hold["id"]}  # what it holds goes on
    assert cp.hold(gpu_count=1)["status"] == "requested"  # nothing new is placed here
    r = cp.http.post(f"/v1/nodes/{node_id}/undrain", headers=ADMIN)
    assert r.status_code == 200, r.text
    agent.round()
    assert agent.status == cp.node("node-1")["status"] == "online"
