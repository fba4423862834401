"""The throwaway Slurm cluster for tests: start it, or skip (fail in CI) without Slurm."""

from __future__ import annotations

import os

import pytest

from control_plane.slurm_bridge.local_cluster import (
    ALWAYS_ON,
    CLOUD,
    SlurmCluster,
    SlurmUnavailable,
)

__all__ = ["ALWAYS_ON", "CLOUD", "SlurmCluster", "SlurmUnavailable", "start_or_skip"]


def start_or_skip(**kwargs: object) -> SlurmCluster:
    """Start a cluster; without Slurm skip, or fail when JITGPU_REQUIRE_SLURM=1 (CI)."""
    try:
        return SlurmCluster(**kwargs).start()  # type: ignore[arg-type]
    except (SlurmUnavailable, OSError) as exc:
        if os.environ.get("JITGPU_REQUIRE_SLURM") == "1":
            pytest.fail(f"JITGPU_REQUIRE_SLURM=1 but no Slurm cluster could start: {exc}")
        pytest.skip(f"Slurm unavailable: {exc}")
