"""`jitgpu demo --slurm` runs to the end: the pre-warmed plain sbatch lands in the reservation."""

from __future__ import annotations

import os

import pytest

from control_plane.slurm_bridge.demo import run_slurm_demo
from control_plane.slurm_bridge.local_files import missing_binaries

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def test_slurm_demo(capsys: pytest.CaptureFixture[str]) -> None:
    if missing_binaries():
        if os.environ.get("JITGPU_REQUIRE_SLURM") == "1":
            pytest.fail(f"JITGPU_REQUIRE_SLURM=1 but Slurm is missing: {missing_binaries()}")
        pytest.skip("Slurm not installed")
    assert run_slurm_demo(boot_s=3.0) == 0
    out = capsys.readouterr().out
    assert "landed in reservation jitgpu-hold_" in out
    assert "time-to-GPU 0.0s" in out or "time-to-GPU 1.0s" in out
