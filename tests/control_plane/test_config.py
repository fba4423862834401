"""Server settings errors name the file, the key and the rule, and never print a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.config import ConfigError, load_settings

SECRET = "s3cr3t-15-chars"  # one character under the 16 the server requires


def test_short_admin_token_from_the_environment_is_refused_without_echo() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"JITGPU_ADMIN_TOKEN": SECRET})
    message = str(caught.value)
    assert "admin_token" in message and "at least 16 characters" in message
    assert "15 characters, value not shown" in message
    assert SECRET not in message and SECRET[:8] not in message


def test_short_admin_token_in_a_file_is_refused_without_echo(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(f"admin_token: {SECRET}\nport: 8080\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert str(path) in str(caught.value) and "admin_token" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_broken_yaml_does_not_quote_the_line_with_the_token(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(f"port: 8080\nadmin_token: {SECRET}-long-enough: oops\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    message = str(caught.value)
    assert "not valid YAML" in message and "line 2" in message
    assert SECRET not in message


def test_other_bad_values_are_still_shown() -> None:
    with pytest.raises(ConfigError, match="got 'loud'"):
        load_settings(env={"JITGPU_LOG_LEVEL": "loud"})


def test_a_good_token_loads() -> None:
    token = "x" * 16
    assert load_settings(env={"JITGPU_ADMIN_TOKEN": token}).admin_token == token


def test_the_shipped_server_yaml_loads_and_paths_follow_its_folder(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    shipped = load_settings(repo / "configs" / "server.yaml", env={"XDG_DATA_HOME": "/data"})
    assert shipped.port == 8080 and shipped.database_url == "sqlite:////data/jitgpu/jitgpu.db"
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "server.yaml"
    path.write_text("database_url: sqlite:///state/cp.db\n")
    # Whatever the working directory, a relative path in the file is beside the file.
    assert load_settings(path, env={}).database_url == f"sqlite:///{folder / 'state' / 'cp.db'}"
    path.write_text("database_url: sqlite:////abs/cp.db\n")
    assert load_settings(path, env={}).database_url == "sqlite:////abs/cp.db"


def test_heartbeats_role_runs_no_jobs_and_refuses_being_told_to() -> None:
    assert load_settings(env={"JITGPU_ROLE": "heartbeats"}).run_jobs is False
    assert load_settings(env={}).run_jobs is True
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"JITGPU_ROLE": "heartbeats", "JITGPU_RUN_JOBS": "true"})
    assert "key 'run_jobs'" in str(caught.value) and "allowed with that role: false" in str(
        caught.value
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"JITGPU_ROLE": "ingest"})
    assert "key 'role'" in str(caught.value) and "'all' or 'heartbeats'" in str(caught.value)


def test_heartbeat_port_must_differ_from_the_port_and_a_child_ignores_it(tmp_path: Path) -> None:
    env = {"JITGPU_PORT": "8080", "JITGPU_HEARTBEAT_PORT": "8081"}
    assert load_settings(env=env).heartbeat_port == 8081
    with pytest.raises(ConfigError) as caught:
        load_settings(env={**env, "JITGPU_HEARTBEAT_PORT": "8080"})
    assert "heartbeat_port 8080 is the server's own port" in str(caught.value)
    # The child itself: the same file (or variables) names the port it listens on.
    path = tmp_path / "server.yaml"
    path.write_text("heartbeat_port: 8081\n")
    child = load_settings(path, env={"JITGPU_ROLE": "heartbeats", "JITGPU_PORT": "8081"})
    assert child.heartbeat_port is None and child.port == 8081
