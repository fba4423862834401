"""The command line as a newcomer meets it: one auth story, readable help, errors and tables."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from control_plane.schemas.allocations import Hold
from smart_agent.cli import waiting
from smart_agent.cli.main import app
from smart_agent.client import Client
from tests.conftest import ADMIN_TOKEN
from tests.support.liveserver import LiveServer

runner = CliRunner()
NO_ENV = {"JITGPU_TOKEN": None, "JITGPU_ADMIN_TOKEN": None, "JITGPU_SERVER": None}


@dataclass
class Live:
    url: str
    key: str

    @property
    def tenant(self) -> dict[str, str | None]:
        return {**NO_ENV, "JITGPU_SERVER": self.url, "JITGPU_TOKEN": self.key}

    @property
    def admin(self) -> dict[str, str | None]:
        return {**NO_ENV, "JITGPU_SERVER": self.url, "JITGPU_ADMIN_TOKEN": ADMIN_TOKEN}


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings) as server, Client(server.url, ADMIN_TOKEN) as admin:
        gpus = [{"uuid": f"G{i}", "model": "A100", "memory_mb": 1} for i in range(4)]
        admin._http.post("/v1/nodes", json={"name": "n1", "gpus": gpus})
        tenant = admin.create_tenant("alice", quota_gpus=8, burst_gpus=0)
        yield Live(server.url, admin.create_api_key(tenant.id).key)
    db.dispose()


def test_login_saves_the_key_0600_and_later_commands_need_no_variable(live: Live) -> None:
    env = {**NO_ENV, "JITGPU_SERVER": live.url}
    result = runner.invoke(app, ["login"], input=live.key + "\n", env=env)
    assert result.exit_code == 0, result.output
    path = Path(os.environ["JITGPU_CONFIG_DIR"]) / "credentials.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert live.key not in result.output
    # Neither a variable nor an option: the server and the key come from the file.
    made = runner.invoke(app, ["hold", "create", "1", "--json"], env=NO_ENV)
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["status"] == "ready"
    # The admin token is saved beside it, and admin commands use it, not the tenant key.
    assert runner.invoke(app, ["admin", "nodes"], env=NO_ENV).exit_code == 2
    admin = runner.invoke(app, ["login", "--admin"], input=ADMIN_TOKEN + "\n", env=NO_ENV)
    assert admin.exit_code == 0, admin.output
    nodes = runner.invoke(app, ["admin", "nodes", "--json"], env=NO_ENV)
    assert nodes.exit_code == 0 and json.loads(nodes.output)[0]["name"] == "n1"


def test_login_refuses_a_key_the_server_refuses(live: Live) -> None:
    env = {**NO_ENV, "JITGPU_SERVER": live.url}
    result = runner.invoke(app, ["login"], input="not-a-key\n", env=env)
    assert result.exit_code == 1 and "refused the API key: unauthenticated" in result.output
    assert not (Path(os.environ["JITGPU_CONFIG_DIR"]) / "credentials.yaml").exists()


def test_admin_commands_read_the_admin_token_not_the_tenant_key(live: Live) -> None:
    env = {**live.tenant, "JITGPU_TOKEN": ADMIN_TOKEN}
    result = runner.invoke(app, ["admin", "tenant-create", "bob", "--quota", "1"], env=env)
    assert result.exit_code == 2
    assert "no admin token: set JITGPU_ADMIN_TOKEN or run `jitgpu login --admin`" in (result.output)
    ok = runner.invoke(app, ["admin", "tenant-create", "bob", "--quota", "1"], env=live.admin)
    assert ok.exit_code == 0 and "API key (shown once)" in ok.output


def test_server_errors_are_printed_as_the_server_wrote_them(live: Live) -> None:
    result = runner.invoke(app, ["hold", "show", "not-an-id"], env=live.tenant)
    assert result.exit_code == 1
    # The pattern's brackets are text, not markup to be swallowed.
    assert "^[a-z]+_[0-9a-f]{16}$" in result.output


def _commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, [*path, name])
        else:
            yield [*path, name], command


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_help_text_keeps_every_bracketed_default() -> None:
    root = get_command(app)
    checked = 0
    for path, command in _commands(root, []):
        shown = _flat(runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).output)
        for param in command.params:
            for part in re.findall(r"\[[^\]]*\]", (getattr(param, "help", None) or "")):
                assert _flat(part.replace("\\", "")) in shown, (path, param.name, part)
                checked += 1
    assert checked >= 10


def test_tables_fit_80_columns_and_wide_shows_every_column(live: Live) -> None:
    for _ in range(2):
        runner.invoke(app, ["hold", "create", "1", "--in", "600", "--ttl", "60"], env=live.tenant)
        runner.invoke(app, ["alloc", "create", "1", "--no-holds"], env=live.tenant)
    ids = {
        a["id"]
        for a in json.loads(runner.invoke(app, ["alloc", "list", "--json"], env=live.tenant).output)
    }
    for what in ("alloc", "hold"):
        table = runner.invoke(app, [what, "list"], env={**live.tenant, "COLUMNS": "80"})
        assert table.exit_code == 0, table.output
        assert max(len(line) for line in table.output.splitlines()) <= 80, table.output
        assert "--wide shows them" in table.output
        wide = runner.invoke(app, [what, "list", "--wide"], env={**live.tenant, "COLUMNS": "80"})
        assert "source" in wide.output or "requested" in wide.output
    shown = runner.invoke(app, ["alloc", "list"], env={**live.tenant, "COLUMNS": "80"}).output
    assert all(i in shown for i in ids)  # ids are whole: the next command needs them


def test_alloc_show_says_why_it_waits(live: Live) -> None:
    runner.invoke(app, ["alloc", "create", "4"], env=live.tenant)
    made = runner.invoke(app, ["alloc", "create", "2", "--json"], env=live.tenant)
    alloc_id = json.loads(made.output)["id"]
    shown = runner.invoke(app, ["alloc", "show", alloc_id], env=live.tenant)
    assert "queued: 2 GPUs not free now (the cluster has 4 in all)" in shown.output
    assert "not yet known: the request waits for GPUs" in shown.output
    never = runner.invoke(app, ["alloc", "create", "1", "--model", "H100"], env=live.tenant)
    assert never.exit_code == 1
    assert "unplaceable: no GPU of model 'H100' in the cluster (models: A100)" in never.output
    assert "(field gpu_model)" in never.output


def _hold(status: str, **extra: object) -> Hold:
    now = datetime.now(UTC)
    fields: dict = {
        "id": "hold_0123456789abcdef",
        "tenant_id": "tnt_0123456789abcdef",
        "status": status,
        "gpu_count": 2,
        "gpu_model": None,
        "gpus": [],
        "start_at": now + timedelta(seconds=300),
        "ttl_s": 900,
        "lead_s": 120,
        "expires_at": now + timedelta(seconds=1200),
        "confidence": 1.0,
        "source": "manual",
        "warmup": None,
        "strategy": "consolidated",
        "label": None,
        "created_at": now,
        "placed_at": None,
        "ready_at": None,
        "warmup_s": None,
        "ended_at": None,
        "allocation_id": None,
        "reason": None,
    }
    return Hold.model_validate({**fields, **extra})


def test_wait_line_names_the_hold_its_state_and_when() -> None:
    hold = _hold("requested")
    line = waiting.hold_line(hold, hold.created_at)
    assert line.startswith("hold hold_0123456789abcdef: requested; GPUs placed and warmed from ")
    assert "(in 3m00s)" in line


def test_ctrl_c_while_waiting_ends_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(_: str) -> Hold:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as stopped:
        waiting.wait_for(
            _hold("warming"), interrupted, lambda h: False, waiting.hold_line, kind="hold", poll_s=0
        )
    assert stopped.value.exit_code == 130
    err = capsys.readouterr().err
    assert "hold hold_0123456789abcdef: warming" in err
    assert "stopped waiting; hold hold_0123456789abcdef is still warming" in err


def test_agent_config_paths_follow_its_folder_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from smart_agent.config import load_agent_config

    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "policy.yaml").write_text("{}\n")
    (folder / "smart-agent.yaml").write_text(
        "policy: policy.yaml\nprediction_log: state/p.db\nwatch:\n  - path: logs\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg, policy = load_agent_config(Path("conf/smart-agent.yaml"))
    assert policy == folder / "policy.yaml"
    assert cfg.prediction_log == str(folder / "state" / "p.db")
    assert cfg.watch[0].path == str(folder / "logs")
    # No --config: the user's config folder, never ./configs of wherever it runs.
    missing = runner.invoke(app, ["agent", "status"])
    assert missing.exit_code == 2
    assert "smart-agent.yaml: copy configs/smart-agent.yaml" in missing.output
    monkeypatch.setenv("JITGPU_CONFIG_DIR", str(folder))
    found = runner.invoke(app, ["agent", "status"])
    assert found.exit_code == 0 and str(folder / "state" / "p.db") in found.output
