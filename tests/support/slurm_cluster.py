"""The throwaway Slurm cluster for tests: start it, or skip (fail in CI) without Slurm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control_plane.slurm_bridge.local_cluster import (
    ALWAYS_ON,
    CLOUD,
    SlurmCluster,
    SlurmUnavailable,
)
from tests.support.procs import JITGPU, Proc, wait_for

__all__ = [
    "ALWAYS_ON",
    "CLOUD",
    "SlurmCluster",
    "SlurmUnavailable",
    "start_agent_on",
    "start_or_skip",
]


def start_or_skip(**kwargs: object) -> SlurmCluster:
    """Start a cluster; without Slurm skip, or fail when JITGPU_REQUIRE_SLURM=1 (CI)."""
    try:
        return SlurmCluster(**kwargs).start()  # type: ignore[arg-type]
    except (SlurmUnavailable, OSError) as exc:
        if os.environ.get("JITGPU_REQUIRE_SLURM") == "1":
            pytest.fail(f"JITGPU_REQUIRE_SLURM=1 but no Slurm cluster could start: {exc}")
        pytest.skip(f"Slurm unavailable: {exc}")


def start_agent_on(
    cluster: SlurmCluster, config: Path, *, key: str, mode: str, procs: list[Proc]
) -> Proc:
    """`jitgpu agent run --config CONFIG` against `cluster`, returned once its Slurm source
    polled with `mode` (`sacct` with accounting, else `squeue`); added to `procs`."""
    agent = Proc(
        [*JITGPU, "agent", "run", "--config", str(config)],
        log=config.parent / "agent.log",
        env={**cluster.env, "JITGPU_TOKEN": key},
    ).start()
    procs.append(agent)
    wait_for(
        lambda: "agent for" in agent.output() or not agent.alive(),
        timeout=30,
        what="the agent to start",
    )
    assert agent.alive(), agent.output()
    wait_for(
        lambda: "slurm source: polling" in agent.output(),
        timeout=15,
        what=f"the agent's first Slurm poll\n{agent.output()[-2000:]}",
    )
    assert f"slurm source: polling {mode}" in agent.output()
    return agent
