"""The demo: its generated configs pass the real loaders, a piece that dies or never comes
up is named with its log, and a one-round run goes end to end."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.node_agent.config import load_config
from smart_agent.config import load_agent_config
from smart_agent.demo.pipeline import TRAIN, Round
from smart_agent.demo.run import Demo, DemoError, _configs, run_demo
from smart_agent.policy import Policy
from smart_agent.procwatch import ProcessWatcher, ProcInfo
from smart_agent.yamlconf import load_model


@pytest.mark.parametrize("llm", [None, "openai/gpt-4o-mini"])
def test_generated_configs_pass_the_real_loaders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: str | None
) -> None:
    if llm:
        monkeypatch.setenv("JITGPU_LLM_MODEL", llm)
        monkeypatch.setenv("JITGPU_LLM_API_BASE", "http://127.0.0.1:9/v1")
        monkeypatch.setenv("JITGPU_LLM_KEY_ENV", "DEMO_LLM_KEY")
    else:
        monkeypatch.delenv("JITGPU_LLM_MODEL", raising=False)
    demo = Demo(tmp_path, colour=False)
    config, policy_path = load_agent_config(_configs(demo, "JITGPU_DEMO_TOKEN"))
    policy = load_model(Policy, policy_path)
    node = load_config(tmp_path / "node.yaml", env={})
    assert config.server == demo.url and config.allocate_on_miss and config.cancel_on_exit
    assert policy.warmup_for("A100") == "demo" and "demo" in node.warmup_profiles
    if llm:
        assert policy.llm is not None and "llm" in policy.predictors
        assert (policy.llm.model, policy.llm.api_base, policy.llm.api_key_env) == (
            llm,
            "http://127.0.0.1:9/v1",
            "DEMO_LLM_KEY",
        )
    else:
        assert policy.llm is None and "llm" not in policy.predictors
    # The process pattern is the demo's own train.py, not any train.py of this user.
    watch = ProcessWatcher(config.processes.patterns, user="alice", source=lambda: procs)
    procs = [
        ProcInfo(1, 0, 1.0, (sys.executable, str(TRAIN), "--nproc_per_node", "2")),
        ProcInfo(2, 0, 1.0, ("python", "train.py")),
        ProcInfo(3, 0, 1.0, ("python", "/elsewhere/train.py")),
    ]
    assert [e.job_id for e in watch.scan()] == ["pid1@1"]


def test_a_piece_that_dies_is_named_with_its_log(tmp_path: Path) -> None:
    demo = Demo(tmp_path, colour=False)
    proc = demo.spawn([sys.executable, "-c", "print('no token'); raise SystemExit(2)"], "agent")
    proc.wait(timeout=30)
    with pytest.raises(DemoError) as err:
        demo.wait_until(lambda: False, timeout=30, what="the agent did not start", log="agent.log")
    assert str(err.value) == f"the agent exited with status 2; read {tmp_path / 'agent.log'}"
    demo.stop_all()
    assert "no token" in (tmp_path / "agent.log").read_text()


def test_a_wait_has_a_deadline_that_names_the_log(tmp_path: Path) -> None:
    demo = Demo(tmp_path, colour=False)
    with pytest.raises(DemoError, match=r"8 GPUs within 0s; read .*node-1\.log"):
        demo.wait_until(lambda: False, timeout=0.1, what="no 8 GPUs", log="node-1.log")


@pytest.mark.e2e
def test_one_short_round_runs_end_to_end_and_keep_leaves_the_cluster_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("JITGPU_LLM_MODEL", raising=False)
    folder = tmp_path / "demo"
    folder.mkdir()
    seen: dict[str, object] = {}

    def explore(env_file: Path) -> None:
        # What the printed commands do, in a shell with the env file sourced.
        seen["mode"] = stat.S_IMODE(env_file.stat().st_mode)
        seen["list"] = subprocess.run(
            ["sh", "-c", f". {env_file} && {sys.executable} -m smart_agent.cli.main alloc list"],
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("JITGPU_")},
        )

    code = run_demo(
        keep=True,
        folder=folder,
        rounds=(Round(2, think_s=2.0, epochs=1),),
        # The agent sees the job by scanning processes every 0.5 s: a job of one 1.5 s epoch
        # outlives two scans even when one is slow (one of 0.5 s could fall between two).
        epoch_s=1.5,
        pause_s=0.5,
        settle_s=2.0,
        explore=explore,
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"this run's folder (logs, prediction log): {folder}" in out
    assert "control plane ready" in out and "round 1: launching train.py" in out
    assert "jobs: 1;" in out, out
    assert f"predictions score --log {folder / 'predictions.db'}" in out
    assert "the cluster stays up" in out and f". {folder / 'env'}" in out
    assert seen["mode"] == 0o600
    listed = seen["list"]
    assert isinstance(listed, subprocess.CompletedProcess)
    assert listed.returncode == 0, listed.stderr
    assert "allocations" in listed.stdout and "alloc_" in listed.stdout
    with sqlite3.connect(folder / "predictions.db") as db:
        jobs = db.execute("SELECT gpus, allocation_id FROM jobs").fetchall()
    assert len(jobs) == 1 and jobs[0][0] == 2 and jobs[0][1]
