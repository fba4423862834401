"""The agent against the real control-plane app: register, warm, claim, run, release, recover."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from control_plane.node_agent.client import ControlPlane
from control_plane.node_agent.reconcile import RESTARTED
from tests.node_agent.conftest import (
    ADMIN,
    AgentFactory,
    ControlPlaneApp,
    finish_tasks,
    settle,
    start_app,
)
from tests.node_agent.helpers import gone, read_pid
from tests.support.nodes import enrol_token
from tests.support.procs import wait_for


def test_registration_and_heartbeat_carry_gpus_and_telemetry(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent("node-1", gpus=3, spine="s1", leaf="l7")
    assert agent.round() == 0.5  # the configured heartbeat interval
    node = cp.node("node-1")
    assert (node["status"], node["spine"], node["leaf"]) == ("online", "s1", "l7")
    assert len(node["gpus"]) == 3 and all(g["model"] == "A100" for g in node["gpus"])
    assert node["gpus"][0]["telemetry"]["temperature_c"] == 34.0
    assert node["host"]["cache_disk_free_mb"] > 0
    assert "memory_pct" in node["host"]


def test_hold_is_warmed_with_a_real_command_then_claimed_and_its_task_runs(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "warmed"
    agent = make_agent(
        warmup_profiles={"mark": [{"command": f"echo $CUDA_VISIBLE_DEVICES > {marker}"}]}
    )
    agent.round()
    hold = cp.hold(gpu_count=2, warmup="mark")
    assert hold["status"] == "placed"
    agent.round()  # desired state arrives: the warm-up starts and is reported
    settle(agent)
    ready = cp.get(f"/v1/holds/{hold['id']}")
    assert ready["status"] == "ready" and ready["warmup_s"] is not None
    uuids = {g["uuid"] for g in hold["gpus"]}
    assert set(marker.read_text().strip().split(",")) == uuids

    script = "import os; print('training on', os.environ['CUDA_VISIBLE_DEVICES'])"
    alloc = cp.claim(hold["id"], command=[sys.executable, "-c", script])
    assert alloc["warm"] is True
    agent.round()
    assert agent.work.allocations[alloc["id"]].task is not None
    finish_tasks(agent)
    done = cp.allocation(alloc["id"])
    assert done["status"] == "released" and done["task_status"] == "exited"
    assert done["exit_code"] == 0
    assert done["output_tail"].startswith("training on GPU-")
    agent.round()
    assert agent.work.allocations == {} and agent.work.holds == {}


def test_partial_claim_mid_warm_up_warms_only_the_kept_gpus_again(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    seen, flag = tmp_path / "seen", tmp_path / "go"
    wait = f"echo $CUDA_VISIBLE_DEVICES >> {seen}; while [ ! -e {flag} ]; do sleep 0.02; done"
    agent = make_agent(gpus=4, warmup_profiles={"slow": [{"command": wait}]})
    agent.round()
    hold = cp.hold(gpu_count=4, warmup="slow")
    agent.round()
    wait_for(seen.exists, timeout=10, what="the hold's warm-up to start")
    first = agent.work.holds[hold["id"]].warmup
    assert first is not None
    alloc = cp.claim(hold["id"], gpu_count=2, command=["sh", "-c", "echo trained"])
    kept = sorted(g["uuid"] for g in alloc["gpus"])
    agent.round()  # the hold is gone from the desired state; two of its GPUs are the job's
    first.join(10)
    assert first.result is not None and first.result.cancelled
    again = agent.work.holds[hold["id"]]
    assert sorted(again.gpu_uuids) == kept and again.warming
    assert agent.work.allocations[alloc["id"]].task is None  # the job waits for the warm-up
    cp.clock.advance(9)
    flag.touch()
    settle(agent)
    assert cp.allocation(alloc["id"])["time_to_gpu_s"] == 9.0
    runs = [sorted(line.split(",")) for line in seen.read_text().split()]
    assert len(runs) == 2 and len(runs[0]) == 4 and runs[1] == kept
    agent.round()
    finish_tasks(agent)
    assert cp.allocation(alloc["id"])["output_tail"].strip() == "trained"
    agent.round()
    assert agent.work.holds == {}


def test_warm_up_hanging_past_its_timeout_fails_the_hold_and_frees_the_gpus(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent(warmup_profiles={"hang": [{"command": "sleep 60", "timeout_s": 0.5}]})
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="hang")
    agent.round()
    settle(agent)
    failed = cp.get(f"/v1/holds/{hold['id']}")
    assert failed["status"] == "failed" and "timed out" in failed["reason"].lower()
    assert all(g["assigned_to"] is None for g in cp.get("/v1/gpus"))


def test_failed_warm_up_fails_the_hold_with_status_and_output(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent(warmup_profiles={"bad": [{"command": "echo no space left; exit 28"}]})
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="bad")
    agent.round()
    settle(agent)
    failed = cp.get(f"/v1/holds/{hold['id']}")
    assert failed["status"] == "failed"
    assert "exit 28" in failed["reason"] and "no space left" in failed["reason"]
    assert all(g["assigned_to"] is None for g in cp.get("/v1/gpus"))


def test_unknown_profile_fails_the_hold(cp: ControlPlaneApp, make_agent: AgentFactory) -> None:
    agent = make_agent()
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="not-here")
    agent.round()
    settle(agent)
    failed = cp.get(f"/v1/holds/{hold['id']}")
    assert failed["status"] == "failed" and "unknown warm-up profile" in failed["reason"]


def test_releasing_an_allocation_stops_its_process_group(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    pidfile = tmp_path / "bg.pid"
    agent = make_agent()
    agent.round()
    r = cp.http.post(
        "/v1/allocations",
        json={"gpu_count": 1, "command": ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"]},
        headers=cp.tenant,
    )
    assert r.status_code == 201, r.text
    alloc = r.json()
    agent.round()
    agent.flush()
    background = wait_for(lambda: read_pid(pidfile), timeout=5, what="the task to start")
    assert cp.allocation(alloc["id"])["task_status"] == "running"
    assert cp.http.delete(f"/v1/allocations/{alloc['id']}", headers=cp.tenant).status_code == 200
    agent.round()  # the allocation is gone from the desired state: stop the group
    finish_tasks(agent)
    wait_for(lambda: gone(background), timeout=5, what="the task's child to die")
    assert cp.allocation(alloc["id"])["task_status"] == "stopped"
    agent.round()
    assert agent.work.allocations == {}


def test_reactive_allocation_warms_first_then_runs_its_task(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    log = tmp_path / "order.log"
    agent = make_agent(
        warmup_profiles={"mark": [{"command": f"echo warm $JITGPU_ALLOCATION_ID >> {log}"}]}
    )
    agent.round()
    body = {
        "gpu_count": 1,
        "warmup": "mark",
        "use_holds": False,
        "command": ["sh", "-c", f"echo task >> {log}"],
    }
    r = cp.http.post("/v1/allocations", json=body, headers=cp.tenant)
    assert r.status_code == 201, r.text
    alloc = r.json()
    assert alloc["time_to_gpu_s"] is None  # not usable until the node has warmed it
    cp.clock.advance(7)
    agent.round()
    settle(agent)
    assert cp.allocation(alloc["id"])["time_to_gpu_s"] == 7.0  # the cold start, measured
    agent.round()
    finish_tasks(agent)
    assert log.read_text().splitlines() == [f"warm {alloc['id']}", "task"]
    assert cp.allocation(alloc["id"])["task_status"] == "exited"


def test_failed_allocation_warm_up_leaves_the_gpus_usable_cold(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    agent = make_agent(warmup_profiles={"bad": [{"command": "exit 9"}]})
    agent.round()
    command = ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.02; done"]
    body = {"gpu_count": 1, "warmup": "bad", "use_holds": False, "command": command}
    alloc = cp.http.post("/v1/allocations", json=body, headers=cp.tenant).json()
    agent.round()
    settle(agent)
    after = cp.allocation(alloc["id"])
    assert after["time_to_gpu_s"] is not None and "warm-up failed (exit 9)" in after["reason"]
    assert agent.work.allocations[alloc["id"]].task is not None  # the job starts cold
    flag.touch()
    finish_tasks(agent)
    assert cp.allocation(alloc["id"])["task_status"] == "exited"


def test_unhealthy_gpu_is_reported_and_not_placed(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent("node-1", gpus=2)
    sick = agent.discovery.gpus[0].uuid
    (tmp_path / "faults-node-1.json").write_text(
        json.dumps({sick: {"healthy": False, "reason": "Xid 48", "memory_used_mb": 81000}})
    )
    agent.round()
    gpus = {g["uuid"]: g for g in cp.get("/v1/gpus")}
    assert gpus[sick]["healthy"] is False
    assert gpus[sick]["telemetry"]["memory_used_mb"] == 81000
    hold = cp.hold(gpu_count=1)
    assert hold["gpus"][0]["uuid"] != sick


def test_re_registration_never_duplicates_gpus(
    cp: ControlPlaneApp, make_agent: AgentFactory
) -> None:
    agent = make_agent("node-1", gpus=2)
    agent.round()
    first = agent.node_id
    agent.registered = False  # as after an outage
    agent.round()
    again = make_agent("node-1", gpus=2)  # a restarted agent on the same host
    again.round()
    assert agent.node_id == again.node_id == first
    assert len(cp.get("/v1/gpus")) == 2 and len(cp.get("/v1/nodes")) == 1


def test_a_replaced_database_enrols_the_node_again(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent("node-1")
    agent.round()
    old_id = agent.node_id
    fresh, _, db = start_app(tmp_path, "replaced.db")  # the database was replaced
    with fresh:
        # Its credential died with the old database: a new enrolment token enrols it again.
        agent.cfg = agent.cfg.model_copy(
            update={"enrol_token": enrol_token(fresh, "node-1", ADMIN)}
        )
        agent.client = ControlPlane("http://testserver", "stale", http=fresh)
        agent.client.set_token(agent.credentials.load().credential)  # type: ignore[union-attr]
        agent.round()
        nodes = fresh.get("/v1/nodes", headers=ADMIN).json()
    db.dispose()
    assert [n["name"] for n in nodes] == ["node-1"] and len(nodes[0]["gpus"]) == 2
    assert agent.node_id == nodes[0]["id"] != old_id


def test_restarted_agent_keeps_ready_holds_and_fails_tasks_it_lost(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent("node-1", gpus=2)
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="default")
    agent.round()
    settle(agent)
    assert cp.get(f"/v1/holds/{hold['id']}")["status"] == "ready"
    r = cp.http.post(
        "/v1/allocations",
        json={"gpu_count": 1, "command": ["sleep", "60"], "use_holds": False},
        headers=cp.tenant,
    )
    alloc = r.json()
    agent.round()
    agent.flush()
    assert cp.allocation(alloc["id"])["task_status"] == "running"
    agent.work.stop_all(1.0)  # the old agent is gone (its task with it)

    new = make_agent("node-1", gpus=2)
    new.round()
    kept = new.work.holds[hold["id"]]
    assert kept.warmup is None  # adopted as warm, not warmed again
    assert cp.get(f"/v1/holds/{hold['id']}")["status"] == "ready"
    lost = cp.allocation(alloc["id"])
    assert lost["status"] == "released" and lost["task_status"] == "failed"
    assert RESTARTED in lost["output_tail"]


def test_sigterm_stops_warm_ups_and_reports_drain(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    pidfile = tmp_path / "warm.pid"
    agent = make_agent(
        warmup_profiles={"slow": [{"command": f"echo $$ > {pidfile}; exec sleep 60"}]}
    )
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="slow")
    agent.round()
    agent.flush()
    pid = wait_for(lambda: read_pid(pidfile), timeout=5, what="the warm-up to start")
    assert cp.get(f"/v1/holds/{hold['id']}")["status"] == "warming"
    agent.request_stop()
    assert agent.run() == 0
    assert gone(pid)
    assert cp.node("node-1")["status"] == "draining"
    # The hold is not failed by a shutdown: liveness re-places it when the node goes offline.
    assert cp.get(f"/v1/holds/{hold['id']}")["status"] == "warming"


def test_heartbeats_go_to_the_port_the_server_names_on_its_host() -> None:
    for server, beats in [
        ("https://ctl.example:8443", "https://ctl.example:8081"),
        ("http://[::1]:8080/jitgpu/", "http://[::1]:8081/jitgpu"),
        ("http://10.0.0.5", "http://10.0.0.5:8081"),
    ]:
        client = ControlPlane(server, "token")
        client.beat_to_port(8081)
        assert client.heartbeats == beats
        client.close()
