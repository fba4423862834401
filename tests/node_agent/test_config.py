"""Node-agent settings: the file, the environment and the command line, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.node_agent.config import (
    CommandAction,
    ConfigError,
    CudaContextAction,
    StageAction,
    load_config,
)
from control_plane.node_agent.main import run_node

REPO = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    cfg = load_config(env={})
    assert cfg.heartbeat_interval_s == 5.0
    assert cfg.backend == "auto" and cfg.server is None
    # The built-in profile works without a GPU: a CUDA warm that skips, and a short command.
    default = cfg.profile("default")
    assert default is not None
    assert [type(a) for a in default] == [CudaContextAction, CommandAction]
    assert cfg.profile("nope") is None


def test_the_example_file_in_configs_is_valid() -> None:
    cfg = load_config(REPO / "configs" / "node-agent.yaml", env={})
    assert "default" in cfg.profile_names()
    assert len(cfg.profile_names()) >= 2


def test_file_then_environment_then_command_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "server: http://file:1\n"
        "token: from-file\n"
        "leaf: leaf-file\n"
        "simulated: {count: 2, model: L4}\n"
        "warmup_profiles:\n"
        "  llm:\n"
        "    - stage: /srv/weights\n"
        "      dest: weights\n"
        "    - command: [python, -c, 'print(1)']\n"
        "      timeout_s: 30\n"
    )
    cfg = load_config(path, env={"JITGPU_SERVER": "http://env:2"})
    assert (cfg.server, cfg.token, cfg.leaf) == ("http://env:2", "from-file", "leaf-file")
    llm = cfg.profile("llm")
    assert llm is not None and isinstance(llm[0], StageAction) and llm[0].dest == "weights"
    assert isinstance(llm[1], CommandAction) and llm[1].timeout_s == 30
    cfg = load_config(
        path,
        {"server": "http://cli:3", "simulated": {"count": None, "model": "H100"}},
        env={"JITGPU_SERVER": "http://env:2", "JITGPU_NODE_TOKEN": "from-env"},
    )
    assert (cfg.server, cfg.token) == ("http://cli:3", "from-env")
    # A None from an unset option leaves the file's value.
    assert (cfg.simulated.count, cfg.simulated.model) == (2, "H100")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("backend: gpu\n", ["key 'backend'", "'auto', 'nvml' or 'simulated'", "got 'gpu'"]),
        ("simulated: {count: 100}\n", ["key 'simulated.count'", "less than or equal to 64"]),
        ("heartbeat_intervall_s: 2\n", ["key 'heartbeat_intervall_s'", "heartbeat_interval_s"]),
        (
            "warmup_profiles: {x: [{command: ls, timeot_s: 3}]}\n",
            ["key 'warmup_profiles.x[0].timeot_s'", "allowed keys: command, timeout_s, env"],
        ),
        (
            "warmup_profiles: {x: [{command: ls, stage: /a}]}\n",
            ["key 'warmup_profiles.x[0]'", "exactly one of the keys: command, stage, cuda_context"],
        ),
        ("warmup_profiles: {x: [{stage: /a, dest: ../up}]}\n", ["dest", "without '..'"]),
        ("name: 'has space'\n", ["key 'name'", "pattern"]),
        ("model_aliases: {'NVIDIA X': 'X (big)'}\n", ["key 'model_aliases.NVIDIA X'", "pattern"]),
        ("simulated: {model: 'A100;'}\n", ["key 'simulated.model'", "pattern"]),
    ],
)
def test_errors_name_the_file_key_value_and_rule(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message


def test_unreadable_or_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", env={})
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(listing, env={})


def test_run_node_refuses_bad_settings_with_status_2(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("JITGPU_SERVER", raising=False)
    monkeypatch.delenv("JITGPU_NODE_TOKEN", raising=False)
    assert run_node(token="t", simulated_gpus=1, config=None) == 2
    assert "control-plane URL" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: gpu\n")
    assert run_node(server="http://127.0.0.1:1", token="t", config=bad) == 2
    assert "key 'backend'" in capsys.readouterr().err


def test_node_help_shows_the_name_default_literally() -> None:
    from typer.testing import CliRunner

    from smart_agent.cli.main import app

    result = CliRunner().invoke(app, ["node", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    # Rich reads square brackets as markup; the default must survive as text.
    assert "Node name [default: host name]." in result.output


def test_heartbeat_server_defaults_to_none_and_is_checked_like_server(tmp_path: Path) -> None:
    assert load_config(env={}).heartbeat_server is None
    cfg = load_config(env={"JITGPU_HEARTBEAT_SERVER": "http://beats:8081"})
    assert cfg.heartbeat_server == "http://beats:8081"
    path = tmp_path / "node.yaml"
    path.write_text("heartbeat_server: beats:8081\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(path) in str(caught.value) and "key 'heartbeat_server'" in str(caught.value)
