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
    "control_plane.replay.budget_policy",
    "control_plane.replay.session_policy",
)


def load_plugins() -> None:
    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


DAY_S = 86400.0


def replay_jobs(
    jobs: Sequence[Job],
    policies: Sequence[str],
    config: SimConfig,
    *,
    train: Sequence[Job] = (),
) -> list[dict[str, object]]:
    """One result per policy spec, in the order given. With `train` jobs, each policy first
    runs on them and the one reported starts from what it learnt (`Policy.adopt`)."""
    load_plugins()
    built = [make_policy(spec) for spec in policies]  # fail on a bad name before any run
    if train:
        for spec, policy in zip(policies, built, strict=True):
            trained = make_policy(spec)
            Simulator(train, trained, config).run()
            policy.adopt(trained)
    return [Simulator(jobs, policy, config).run() for policy in built]


def with_budget(policies: Sequence[str], budget: float | None) -> list[str]:
    """`--budget B` given to every `default` spec that does not set its own budget."""
    if budget is None:
        return list(policies)
    if budget < 0:
        raise ValueError("budget must not be negative")
    out, steered = [], False
    for spec in policies:
        name, _, arg = spec.strip().partition(":")
        if name.strip() == "default":
            steered = True
            if "budget=" not in arg:
                spec = f"default:{arg},budget={budget:g}" if arg else f"default:budget={budget:g}"
        out.append(spec)
    if not steered:
        raise ValueError("--budget applies to --policy default only, and none was given")
    return out


def split_days(jobs: Sequence[Job], spec: str) -> tuple[list[Job], list[Job]]:
    """`TRAIN:TEST` days -> (jobs submitted in the first TRAIN days, those in the TEST days
    after them), days counted from the trace's t0."""
    try:
        train_days, test_days = (float(part) for part in spec.split(":"))
    except ValueError:
        raise ValueError(
            f"--split-days {spec!r}: expected TRAIN:TEST in days, e.g. 10:10"
        ) from None
    if train_days <= 0 or test_days <= 0:
        raise ValueError(f"--split-days {spec!r}: both parts must be positive")
    cut, end = train_days * DAY_S, (train_days + test_days) * DAY_S
    train = [j for j in jobs if j.submit < cut]
    test = [j for j in jobs if cut <= j.submit < end]
    if not train or not test:
        raise ValueError(f"--split-days {spec!r}: no jobs in the training or the test days")
    return train, test


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
    budget: float | None = None,
    split: str | None = None,
) -> list[dict[str, object]]:
    """Replay `trace_path` on `capacity` GPUs once per policy; a list of metric dicts.

    `budget` is the idle budget of `default` specs (see `with_budget`); `split` ("TRAIN:TEST"
    days) reports on the test days only, each policy first run on the training days.
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
    policies = with_budget(policies, budget)
    jobs = load_trace(trace_path)
    if split is None:
        return replay_jobs(jobs, policies, config)
    train, test = split_days(jobs, split)
    return replay_jobs(test, policies, config, train=train)
