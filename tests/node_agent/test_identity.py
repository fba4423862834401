"""The agent's identity: it enrols once, keeps its credential (0600), rotates it on request,
and gives tasks and warm-ups an environment without any of its secrets."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from control_plane.node_agent.task_env import clean_env
from control_plane.schemas.enums import Scope
from control_plane.services.auth import mint_key
from tests.node_agent.conftest import ADMIN, AgentFactory, ControlPlaneApp, finish_tasks, settle


def credential_file(tmp_path: Path, name: str) -> Path:
    return tmp_path / "cache-state" / f"credential-{name}.json"


def test_the_agent_enrols_once_keeps_its_credential_private_and_reuses_it(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent("node-1")
    agent.round()
    path = credential_file(tmp_path, "node-1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())
    node = cp.node("node-1")
    assert stored["node_id"] == node["id"] and stored["credential"].startswith("jgn_")
    # A restart finds it: its enrolment token (single-use, spent) is not needed again.
    again = make_agent("node-1", enrol_token="jge_spent-and-not-needed")
    again.round()
    assert again.node_id == node["id"] and cp.node("node-1")["status"] == "online"
    assert json.loads(path.read_text()) == stored
    credentials = [t for t in cp.get("/v1/node-tokens") if t["kind"] == "credential"]
    assert len(credentials) == 1 and credentials[0]["revoked_at"] is None


def test_the_agent_rotates_when_the_control_plane_asks(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent("node-1")
    agent.round()
    path = credential_file(tmp_path, "node-1")
    old = json.loads(path.read_text())["credential"]
    r = cp.http.post(f"/v1/nodes/{agent.node_id}/rotate", headers=ADMIN)
    assert r.status_code == 202
    agent.round()  # the reply says rotate; the agent does, and keeps the new one
    new = json.loads(path.read_text())["credential"]
    assert new != old and stat.S_IMODE(path.stat().st_mode) == 0o600
    beat = f"/v1/nodes/{agent.node_id}/heartbeat"
    stale = cp.http.post(beat, json={}, headers={"Authorization": f"Bearer {old}"})
    assert stale.status_code == 401
    agent.round()
    assert cp.node("node-1")["status"] == "online"


def test_tasks_and_warmups_see_the_allow_list_and_no_credential(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    warm_out = tmp_path / "warm-env.json"
    # The agent's own environment holds secrets, a listed variable and an unlisted one.
    agent = make_agent(
        "node-1",
        tasks={"pass_env": ["SITE_SETTING", "NOT_SET_ANYWHERE"]},
        warmup_profiles={
            "dump": [{"command": f"{sys.executable} -c '{dump}' > {warm_out}", "timeout_s": 30}]
        },
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/home/agent",
            "LANG": "C.UTF-8",
            "JITGPU_NODE_TOKEN": "jgn_secret-node-token",
            "JITGPU_ENROL_TOKEN": "jge_secret-enrol-token",
            "JITGPU_ADMIN_TOKEN": "admin-secret",
            "AWS_SECRET_ACCESS_KEY": "aws-secret",
            "SITE_SETTING": "listed",
        },
    )
    agent.round()
    hold = cp.hold(gpu_count=1, warmup="dump")
    agent.round()
    settle(agent)
    alloc = cp.claim(hold["id"], command=[sys.executable, "-c", dump])
    agent.round()
    finish_tasks(agent)
    task_env = json.loads(cp.allocation(alloc["id"])["output_tail"].strip().splitlines()[-1])
    warm_env = json.loads(warm_out.read_text())
    credential = json.loads(credential_file(tmp_path, "node-1").read_text())["credential"]
    for env, owner in ((task_env, "JITGPU_ALLOCATION_ID"), (warm_env, "JITGPU_HOLD_ID")):
        text = json.dumps(env)
        for secret in ("secret", "admin-secret", credential):
            assert secret not in text
        assert env["SITE_SETTING"] == "listed" and "NOT_SET_ANYWHERE" not in env
        assert env["HOME"] == "/home/agent" and env["LANG"] == "C.UTF-8"
        assert env["CUDA_VISIBLE_DEVICES"] == hold["gpus"][0]["uuid"]
        assert owner in env and "JITGPU_GPU_UUIDS" in env
        # The folder a job is shown is not where the node keeps its credential.
        assert not list(Path(env["JITGPU_CACHE_DIR"]).rglob("credential-*"))
        ours = {k for k in env if k.startswith("JITGPU_")}
        assert ours <= {
            "JITGPU_ALLOCATION_ID",
            "JITGPU_HOLD_ID",
            "JITGPU_GPU_UUIDS",
            "JITGPU_CACHE_DIR",
        }


def test_clean_env_keeps_the_allow_list_and_never_our_variables() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_PRELOAD": "/evil.so",
        "JITGPU_NODE_TOKEN": "x",
        "JITGPU_SERVER": "http://cp",
        "EXTRA": "1",
    }
    assert clean_env(environ, ["EXTRA", "JITGPU_NODE_TOKEN", "MISSING"]) == {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
        "CUDA_VISIBLE_DEVICES": "0",
        "EXTRA": "1",
    }


def test_an_agent_with_a_node_token_from_before_enrolment_enrols_with_it_once(
    cp: ControlPlaneApp, make_agent: AgentFactory, tmp_path: Path
) -> None:
    assert cp.db is not None
    with cp.db.write() as session:  # a token as `POST /v1/node-tokens` minted before 0004
        _, old_token = mint_key(
            session, scope=Scope.NODE, tenant_id=None, label="old", now=cp.clock.now
        )
    agent = make_agent("node-1", enrol_token=None, token=old_token)
    agent.round()
    assert cp.node("node-1")["status"] == "online"
    stored = json.loads(credential_file(tmp_path, "node-1").read_text())
    assert stored["credential"] != old_token and stored["node_id"] == agent.node_id
    # The old token enrols that node no more; the agent goes on with its own credential.
    again = cp.http.post(
        "/v1/nodes/enrol", json={"name": "node-1"}, headers={"Authorization": f"Bearer {old_token}"}
    )
    assert again.status_code == 403 and again.json()["error"]["code"] == "already_enrolled"
    restarted = make_agent("node-1", enrol_token=None, token=old_token)
    restarted.round()
    assert restarted.node_id == agent.node_id and cp.node("node-1")["status"] == "online"


def test_run_node_without_any_credential_says_how_to_get_one(
    tmp_path: Path, capsys, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from control_plane.node_agent.main import run_node

    for var in ("JITGPU_NODE_TOKEN", "JITGPU_ENROL_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "node.yaml"
    config.write_text(f"cache_dir: {tmp_path / 'cache'}\n")
    assert run_node(server="http://127.0.0.1:1", name="n1", simulated_gpus=1, config=config) == 2
    err = capsys.readouterr().err
    assert "JITGPU_ENROL_TOKEN" in err and str(tmp_path / "cache-state") in err
