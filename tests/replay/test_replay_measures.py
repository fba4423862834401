"""GPU-weighted time-to-GPU beside the per-job figures, on hand-made traces."""

from __future__ import annotations

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.metrics import ttg_measures, weighted_percentile
from control_plane.replay.policies import make_policy
from control_plane.replay.report import format_table
from control_plane.replay.trace import Job

COLD = 100.0


def _jobs(*rows: tuple[str, float, int, float]) -> list[Job]:
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


def test_weighting_by_gpus_counts_a_large_cold_job_as_the_gpu_time_it_wastes() -> None:
    # Nine 1-GPU jobs start warm, one 32-GPU job waits 120 s.
    measures = ttg_measures([0.0] * 9 + [120.0], [1] * 9 + [32])
    assert measures["mean_time_to_gpu_s"] == 12.0
    assert measures["gpu_weighted_mean_time_to_gpu_s"] == pytest.approx(120 * 32 / 41, abs=1e-3)
    assert measures["p95_time_to_gpu_s"] == pytest.approx(66.0)
    assert measures["gpu_weighted_p95_time_to_gpu_s"] == 120.0


def test_weighted_percentile_of_equal_weights_is_the_plain_rank() -> None:
    pairs = [(float(v), 1) for v in range(1, 101)]
    assert weighted_percentile(pairs, 95) == 95.0
    assert weighted_percentile([], 95) == 0.0


def test_replay_reports_both_measures_and_the_table_shows_them() -> None:
    load_plugins()
    # A keeps its 1 GPU warm for the next 1-GPU job; B's 8-GPU jobs come too late for it.
    jobs = _jobs(
        ("a", 0, 1, 50),
        ("a", 200, 1, 50),
        ("b", 0, 8, 50),
        ("b", 2000, 8, 50),
    )
    sim = Simulator(jobs, make_policy("keepalive:300"), SimConfig(32, cold_start_s=COLD))
    result = sim.run()
    assert result["mean_time_to_gpu_s"] == 75.0  # one warm hit of four jobs
    # 1 GPU x 0 s + 1 x 100 + 8 x 100 + 8 x 100 over 18 GPUs.
    assert result["gpu_weighted_mean_time_to_gpu_s"] == pytest.approx(1700 / 18, abs=1e-3)
    assert result["gpu_weighted_p95_time_to_gpu_s"] == COLD
    table = format_table([result])
    assert "GPU-wtd mean s" in table and "94.4" in table
