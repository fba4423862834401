"""`jitgpu admin node-token ...` and `jitgpu admin gpu-move` against a live server."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.node_agent.identity import CredentialStore
from smart_agent.cli.main import app
from tests.conftest import ADMIN_TOKEN
from tests.support.liveserver import LiveServer

runner = CliRunner()


@dataclass
class Live:
    url: str
    env: dict[str, str]

    def call(self, method: str, path: str, token: str, body: object = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(method, self.url + path, json=body, headers=headers, timeout=10)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings) as server:
        yield Live(server.url, {"JITGPU_SERVER": server.url, "JITGPU_ADMIN_TOKEN": ADMIN_TOKEN})
    db.dispose()


def jitgpu(live: Live, *args: str) -> str:
    result = runner.invoke(app, ["admin", *args], env=live.env)
    assert result.exit_code == 0, result.output
    return result.output


def register(live: Live, name: str, credential: str, gpus: int = 0) -> dict:
    body = {
        "name": name,
        "gpus": [{"uuid": f"GPU-{name}-{i}", "model": "A100", "memory_mb": 1} for i in range(gpus)],
    }
    r = live.call("POST", "/v1/nodes", credential, body)
    assert r.status_code == 201, r.text
    return r.json()


def test_create_prints_an_enrolment_token_that_enrols_its_node(live: Live) -> None:
    token = jitgpu(live, "node-token", "create", "node-1", "--ttl", "600").strip()
    assert token.startswith("jge_")
    r = live.call("POST", "/v1/nodes/enrol", token, {"name": "node-1"})
    assert r.status_code == 201 and r.json()["name"] == "node-1"
    listed = json.loads(jitgpu(live, "node-token", "list", "--json"))
    assert {(t["kind"], t["node_name"]) for t in listed} == {
        ("enrolment", "node-1"),
        ("credential", "node-1"),
    }
    assert token not in json.dumps(listed) and r.json()["credential"] not in json.dumps(listed)


def test_enrol_writes_the_agents_credential_file_and_prints_no_secret(
    live: Live, tmp_path: Path
) -> None:
    out = tmp_path / "state" / "credential-node-1.json"
    printed = jitgpu(live, "node-token", "enrol", "node-1", "--out", str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    stored = CredentialStore(out).load()  # the agent reads what the command wrote
    assert stored is not None and stored.name == "node-1" and stored.server == live.url
    assert stored.credential not in printed and str(out) in printed.replace("\n", "")
    node = register(live, "node-1", stored.credential)
    assert node["id"] == stored.node_id


def test_rotate_asks_the_agent_or_issues_now_and_revoke_drains(live: Live, tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    jitgpu(live, "node-token", "enrol", "node-1", "--out", str(first))
    old = CredentialStore(first).load()
    assert old is not None
    register(live, "node-1", old.credential, gpus=1)
    beat = f"/v1/nodes/{old.node_id}/heartbeat"
    jitgpu(live, "node-token", "rotate", old.node_id)
    assert live.call("POST", beat, old.credential, {}).json()["rotate_credential"] is True

    refused = runner.invoke(
        app, ["admin", "node-token", "rotate", old.node_id, "--now"], env=live.env
    )
    assert refused.exit_code == 2 and "--out" in refused.output
    second = tmp_path / "second.json"
    jitgpu(live, "node-token", "rotate", old.node_id, "--now", "--out", str(second))
    new = CredentialStore(second).load()
    assert new is not None and new.credential != old.credential
    assert live.call("POST", beat, old.credential, {}).status_code == 401
    assert live.call("POST", beat, new.credential, {}).json()["rotate_credential"] is False

    listed = json.loads(jitgpu(live, "node-token", "list", "--json"))
    live_cred = next(t for t in listed if t["kind"] == "credential" and not t["revoked_at"])
    revoked = json.loads(jitgpu(live, "node-token", "revoke", live_cred["id"], "--json"))
    assert revoked["revoked_at"] is not None
    assert live.call("POST", beat, new.credential, {}).status_code == 401
    node = live.call("GET", f"/v1/nodes/{old.node_id}", ADMIN_TOKEN).json()
    assert node["status"] == "draining"


def test_gpu_move_and_refusals(live: Live, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    jitgpu(live, "node-token", "enrol", "node-a", "--out", str(a))
    jitgpu(live, "node-token", "enrol", "node-b", "--out", str(b))
    cred_a, cred_b = CredentialStore(a).load(), CredentialStore(b).load()
    assert cred_a is not None and cred_b is not None
    register(live, "node-a", cred_a.credential, gpus=1)
    output = jitgpu(live, "gpu-move", "GPU-node-a-0", cred_b.node_id)
    assert "GPU-node-a-0" in output and "node-b" in output
    gpus = live.call("GET", "/v1/gpus", ADMIN_TOKEN).json()
    assert [(g["uuid"], g["node"]) for g in gpus] == [("GPU-node-a-0", "node-b")]
    missing = runner.invoke(
        app, ["admin", "node-token", "revoke", "key_0000000000000000"], env=live.env
    )
    assert missing.exit_code == 1 and "not_found" in missing.output
    assert len(missing.output.strip().splitlines()) == 1
