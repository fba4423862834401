"""tasks.user: jobs run as another OS user, who cannot read the agent's credential file."""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from control_plane.node_agent.config import AgentConfig, ConfigError, load_config
from control_plane.node_agent.identity import write_private
from control_plane.node_agent.reconcile import Work
from control_plane.node_agent.run_as import resolve_run_as
from control_plane.schemas.nodes import NodeAssignment
from tests.node_agent.helpers import base_env
from tests.support.procs import wait_for


def config_file(folder: Path, **values: object) -> Path:
    path = folder / "agent.yaml"
    base = {"cache_dir": str(folder / "cache"), "backend": "simulated"}
    path.write_text(yaml.safe_dump({**base, **values}))
    return path


def some_user() -> pwd.struct_passwd:
    """A user of this machine other than root (every system has one, e.g. nobody)."""
    return next(u for u in pwd.getpwall() if u.pw_uid != 0)


def test_an_unknown_user_is_a_config_error_naming_file_key_and_allowed_values(
    tmp_path: Path,
) -> None:
    path = config_file(tmp_path, tasks={"user": "no-such-user-for-jitgpu"})
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    text = str(err.value)
    assert str(path) in text and "'tasks.user'" in text and "no-such-user-for-jitgpu" in text
    assert "allowed: the name or numeric uid of an existing user" in text


def test_root_is_refused_and_an_agent_not_root_cannot_switch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jobs must not run as root"):
        resolve_run_as("root", source="a.yaml")
    other = some_user()
    with pytest.raises(ValueError, match="needs the agent to run as root, and it runs as uid 1000"):
        resolve_run_as(other.pw_name, source="a.yaml", euid=1000)
    as_root = resolve_run_as(str(other.pw_uid), source="a.yaml", euid=0)
    assert as_root is not None and (as_root.uid, as_root.gid) == (other.pw_uid, other.pw_gid)
    assert resolve_run_as(None, source="a.yaml") is None


def test_stage_actions_are_refused_with_a_task_user(tmp_path: Path) -> None:
    profile = [{"command": "true"}, {"stage": "/srv/models/m.bin"}]
    path = config_file(
        tmp_path, tasks={"user": some_user().pw_name}, warmup_profiles={"model": profile}
    )
    with pytest.raises(ConfigError, match=r"'warmup_profiles\.model\[1\]\.stage': stage actions"):
        load_config(path, env={})


@pytest.fixture
def job_user() -> Iterator[str | None]:
    """A throwaway user when this runs as root (removed after); None otherwise."""
    if os.geteuid() != 0:
        yield None
        return
    name = f"jg{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", name],
        check=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def test_a_job_runs_as_the_task_user_and_cannot_read_the_credential(job_user: str | None) -> None:
    # Under a folder others may enter (pytest's own is 0700, which would hide the file anyway).
    with tempfile.TemporaryDirectory() as base:
        folder = Path(base)
        folder.chmod(0o755)
        if job_user is None:
            # Not root: the same setting is a config error that says why.
            path = config_file(folder, tasks={"user": some_user().pw_name})
            with pytest.raises(ConfigError, match="needs the agent to run as root"):
                load_config(path, env={})
            return
        cfg = load_config(config_file(folder, tasks={"user": job_user}), env={})
        credential = cfg.state_path / "credential-node-a.json"
        write_private(credential, '{"credential": "jgn_secret-of-the-node"}\n')
        out = run_job(cfg, f"id -u; id -G; cat {credential}; ls {cfg.state_path}; touch made")
        assert oct(cfg.state_path.stat().st_mode & 0o777) == "0o700"
    uid = pwd.getpwnam(job_user).pw_uid
    lines = out.splitlines()
    assert lines[0] == str(uid)
    assert "0" not in lines[1].split()  # none of root's groups
    assert "jgn_secret-of-the-node" not in out
    assert out.count("Permission denied") == 2, out


def run_job(cfg: AgentConfig, script: str) -> str:
    """Run `script` as an allocation's task through the agent's own reconciler."""
    done = threading.Event()
    work = Work(cfg, clock=lambda: 0.0, env=base_env(), on_change=done.set)
    assignment = NodeAssignment(
        kind="allocation",
        id="alloc_1",
        status="allocated",
        gpu_uuids=["GPU-0"],
        command=["sh", "-c", script],
    )
    work.apply([assignment])
    local = work.allocations["alloc_1"]
    wait_for(lambda: local.task is not None and local.task.finished, timeout=10, what="the task")
    assert local.task is not None and local.task.run_as is not None
    made = cfg.cache_path / "made"
    assert made.stat().st_uid == local.task.run_as.uid  # the job could write in its folder
    return local.task.tail.text()
