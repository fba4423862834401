"""Entry point for `jitgpu replay`: run named policies over a trace file and collect metrics."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

# Importing these modules registers the built-in policies.
from control_plane.replay import baselines, histogram  # noqa: F401
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import make_policy
from control_plane.replay.trace import Job, load_trace

# Optional modules that register more policies (predictor-driven ones) when present.
PLUGIN_MODULES = (
    "control_plane.replay.predictor_policies",
    "control_plane.replay.llm_policy",
)


def load_plugins() -> None:
    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def replay_jobs(
    jobs: Sequence[Job],
    policies: Sequence[str],
    config: SimConfig,
) -> list[dict[str, object]]:
    """One result per policy spec, in the order given."""
    load_plugins()
    built = [make_policy(spec) for spec in policies]  # fail on a bad name before any run
    return [Simulator(jobs, policy, config).run() for policy in built]


def run_replay(
    trace_path: str | Path,
    capacity: int,
    gpus_per_node: int = 8,
    cold_start_s: float = 120.0,
    policies: Sequence[str] = ("reactive",),
    *,
    nodes_per_leaf: int = 4,
    backfill: bool = False,
    max_held_gpus_per_user: int | None = None,
) -> list[dict[str, object]]:
    """Replay `trace_path` on `capacity` GPUs once per policy; a list of metric dicts.

    Raises TraceError for an unreadable or malformed trace and ValueError for a bad
    argument or an unknown policy (the message lists the known ones).
    """
    if capacity < 1:
        raise ValueError("capacity must be at least 1 GPU")
    if gpus_per_node < 1:
        raise ValueError("gpus-per-node must be at least 1")
    if cold_start_s < 0:
        raise ValueError("cold-start must not be negative")
    if not policies:
        raise ValueError("give at least one policy")
    config = SimConfig(
        capacity=capacity,
        gpus_per_node=gpus_per_node,
        nodes_per_leaf=nodes_per_leaf,
        cold_start_s=float(cold_start_s),
        backfill=backfill,
        max_held_gpus_per_user=max_held_gpus_per_user,
    )
    return replay_jobs(load_trace(trace_path), policies, config)
