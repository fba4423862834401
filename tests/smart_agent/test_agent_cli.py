"""The `jitgpu` command line: alloc and hold against a live server, policy check, replay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.replay import format_json, run_replay
from smart_agent.cli.main import app
from smart_agent.client import Client
from tests.conftest import ADMIN_TOKEN
from tests.support.liveserver import LiveServer

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@dataclass
class Live:
    tenant: dict[str, str]  # environment of the tenant's commands
    admin: dict[str, str]  # environment of admin commands
    tenant_id: str


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings) as server:
        with Client(server.url, ADMIN_TOKEN) as admin:
            admin._http.post(
                "/v1/nodes",
                json={
                    "name": "n1",
                    "gpus": [{"uuid": f"G{i}", "model": "A100", "memory_mb": 1} for i in range(4)],
                },
            )
        admin_env = {"JITGPU_SERVER": server.url, "JITGPU_ADMIN_TOKEN": ADMIN_TOKEN}
        result = runner.invoke(
            app, ["admin", "tenant-create", "alice", "--quota", "2", "--json"], env=admin_env
        )
        assert result.exit_code == 0, result.output
        lines = result.output.strip().splitlines()
        key = json.loads(lines[-1])["key"]
        tenant_id = json.loads("\n".join(lines[:-1]))["id"]
        yield Live({"JITGPU_SERVER": server.url, "JITGPU_TOKEN": key}, admin_env, tenant_id)
    db.dispose()


@pytest.fixture
def env(live: Live) -> dict[str, str]:
    return live.tenant


def _json(args: list[str], env: dict[str, str]) -> object:
    result = runner.invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_hold_then_alloc_claims_it_and_release(env: dict[str, str]) -> None:
    hold = _json(["hold", "create", "2", "--ttl", "600", "--wait"], env)
    assert hold["status"] == "ready"  # type: ignore[index]
    alloc = _json(["alloc", "create", "2"], env)
    assert alloc["hold_id"] == hold["id"] and alloc["warm"] is True  # type: ignore[index]
    listed = _json(["alloc", "list"], env)
    assert [a["id"] for a in listed] == [alloc["id"]]  # type: ignore[index, union-attr]
    released = _json(["alloc", "release", alloc["id"]], env)  # type: ignore[index]
    assert released["status"] == "released"  # type: ignore[index]
    table = runner.invoke(app, ["hold", "list"], env=env)
    assert table.exit_code == 0 and hold["id"] in table.output  # type: ignore[index]


def test_hold_claim_takes_only_the_gpus_asked_for(env: dict[str, str]) -> None:
    hold = _json(["hold", "create", "2", "--ttl", "600", "--wait"], env)
    hold_id = hold["id"]  # type: ignore[index]
    too_many = runner.invoke(app, ["hold", "claim", hold_id, "--gpus", "3"], env=env)
    assert too_many.exit_code == 1 and "invalid_request" in too_many.output
    alloc = _json(["hold", "claim", hold_id, "--gpus", "1"], env)
    assert alloc["gpu_count"] == 1 and len(alloc["gpus"]) == 1  # type: ignore[index, arg-type]
    after = _json(["hold", "show", hold_id], env)
    assert after["reason"] == "claimed 1 of 2 GPUs; 1 released"  # type: ignore[index]


def test_refusals_are_one_line_with_the_code(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["alloc", "create", "3"], env=env)
    assert result.exit_code == 1
    assert "quota_exceeded" in result.output and "Traceback" not in result.output
    missing = runner.invoke(app, ["hold", "show", "hold_0000000000000000"], env=env)
    assert missing.exit_code == 1 and "not_found" in missing.output


def test_policy_check_prints_the_effective_policy_or_the_errors(tmp_path: Path) -> None:
    good = runner.invoke(
        app, ["policy", "check", str(REPO / "configs" / "prewarm-policy.yaml"), "--json"]
    )
    assert good.exit_code == 0 and json.loads(good.output)["max_gpus_total"] == 16
    bad = tmp_path / "p.yaml"
    bad.write_text("min_confidence: 2\n")
    result = runner.invoke(app, ["policy", "check", str(bad)])
    assert result.exit_code == 1 and f"{bad}:1" in result.output


def test_replay_prints_the_documented_json(tmp_path: Path) -> None:
    trace = REPO / "tests" / "data" / "helios_venus_slice.csv"
    result = runner.invoke(
        app,
        [
            "replay",
            "--trace",
            str(trace),
            "--capacity",
            "968",
            "--policy",
            "reactive",
            "--policy",
            "keepalive:600",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    # The command prints what the replay API gives (its fields are tested beside the API).
    expected = run_replay(trace, 968, policies=["reactive", "keepalive:600"])
    assert json.loads(result.output) == json.loads(format_json(expected))
    bad = runner.invoke(
        app, ["replay", "--trace", str(trace), "--capacity", "8", "--policy", "nonsense"]
    )
    assert bad.exit_code == 2 and "unknown policy" in bad.output


def _policy(live: Live) -> dict:
    return _json(["policy", "show"], live.tenant)["server"]  # type: ignore[index]


def test_policy_set_changes_only_the_limits_given(live: Live) -> None:
    first = runner.invoke(
        app,
        [
            "admin",
            "policy-set",
            live.tenant_id,
            "--max-held-gpus",
            "3",
            "--max-hold-ttl-s",
            "1200",
            "--allowed-warmup",
            "quick",
            "--holds-may-preempt-holds",
        ],
        env=live.admin,
    )
    assert first.exit_code == 0, first.output
    after_first = _policy(live)
    assert after_first["max_held_gpus"] == 3 and after_first["max_hold_ttl_s"] == 1200
    assert after_first["allowed_warmups"] == ["quick"]
    assert after_first["holds_may_preempt_holds"] is True
    second = runner.invoke(
        app,
        ["admin", "policy-set", live.tenant_id, "--max-idle-gpu-hours-per-day", "2.5"],
        env=live.admin,
    )
    assert second.exit_code == 0, second.output
    assert json.loads(second.output)["max_idle_gpu_hours_per_day"] == 2.5
    # What the second call did not name is what the first set, not the defaults.
    assert _policy(live) == {**after_first, "max_idle_gpu_hours_per_day": 2.5}
    third = runner.invoke(
        app,
        ["admin", "policy-set", live.tenant_id, "--any-warmup", "--no-holds-may-preempt-holds"],
        env=live.admin,
    )
    assert third.exit_code == 0, third.output
    final = _policy(live)
    assert final["allowed_warmups"] is None and final["holds_may_preempt_holds"] is False
    assert final["max_held_gpus"] == 3 and final["max_hold_ttl_s"] == 1200
    nothing = runner.invoke(app, ["admin", "policy-set", live.tenant_id], env=live.admin)
    assert nothing.exit_code == 2 and "nothing to change" in nothing.output


def test_policy_show_prints_the_server_budget_and_the_local_policy(live: Live) -> None:
    shown = _json(
        ["policy", "show", "--file", str(REPO / "configs" / "prewarm-policy.yaml")], live.tenant
    )
    assert shown["server"]["tenant_id"] == live.tenant_id  # type: ignore[index]
    assert shown["server"]["max_held_gpus"] == 8 and shown["server"]["held_gpus"] == 0  # type: ignore[index]
    assert shown["local"]["max_gpus_total"] == 16  # type: ignore[index]
    hold = _json(["hold", "create", "2", "--ttl", "600"], live.tenant)
    assert _policy(live)["held_gpus"] == 2, hold
    table = runner.invoke(app, ["policy", "show"], env=live.tenant)
    assert table.exit_code == 0
    assert "server-side policy of tenant alice" in table.output
    assert "max_held_gpus: 8" in table.output and "held_gpus: 2" in table.output


def test_tenant_create_with_an_online_batch_split(live: Live) -> None:
    args = ["admin", "tenant-create", "bob", "--quota", "10", "--online-share", "0.7", "--no-key"]
    bob = _json(args, live.admin)
    assert bob["online_share"] == 0.7 and bob["quota_gpus"] == 10  # type: ignore[index]
    bad = runner.invoke(
        app,
        ["admin", "tenant-create", "eve", "--quota", "1", "--online-share", "2"],
        env=live.admin,
    )
    assert bad.exit_code == 2 and "online-share" in bad.output
