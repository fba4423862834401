"""Reading Slurm's machine-readable output, and the bridge's settings (no Slurm needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.slurm_bridge.config import ConfigError, load_config
from control_plane.slurm_bridge.slurm import SlurmNode, gpu_count, parse_pairs, slurm_time

NODE_LINE = (
    "NodeName=gpu1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 Gres=gpu:a100:4(S:0-1) "
    "NodeAddr=127.0.0.1 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian  "
    "State=MIXED+RESERVED Partitions=gpu,debug GresUsed=gpu:a100:1(IDX:0),shard:0 "
    "Reason=(null)"
)


def test_pairs_keep_values_with_spaces() -> None:
    f = parse_pairs(NODE_LINE)
    assert f["OS"] == "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian"
    assert f["State"] == "MIXED+RESERVED" and f["Partitions"] == "gpu,debug"
    assert gpu_count(f["Gres"]) == 4 and gpu_count(f["GresUsed"]) == 1


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:a:1,gpu:b:2", 3), ("shard:8", 0), ("", 0)],
)
def test_gpu_count(gres: str, count: int) -> None:
    assert gpu_count(gres) == count


@pytest.mark.parametrize(
    ("state", "down", "up", "usable", "failed"),
    [
        ("IDLE+CLOUD+POWERED_DOWN", True, False, False, False),
        ("IDLE+CLOUD+NOT_RESPONDING+POWERING_UP", False, True, False, False),
        ("IDLE+CLOUD+RESERVED", False, False, True, False),
        ("DOWN+CLOUD+POWERED_DOWN", True, False, False, True),
        ("MIXED", False, False, True, False),
    ],
)
def test_node_power_states(state: str, down: bool, up: bool, usable: bool, failed: bool) -> None:
    node = SlurmNode(name="n", state=state, gpus=2, gpus_used=0, partitions=())
    assert (node.powered_down, node.powering_up, node.usable, node.failed) == (
        down,
        up,
        usable,
        failed,
    )


def test_slurm_times() -> None:
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    when = slurm_time("2026-11-27T03:33:48")
    assert when is not None and when.tzinfo is not None


def test_config_errors_name_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("poll_s: 0\ntenants:\n  alice: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert str(path) in text and "poll_s" in text and "tenants" in text
    path.write_text("pol_s: 1\n")
    with pytest.raises(ConfigError, match="pol_s"):
        load_config(path)


def test_example_config_loads_and_maps_tenants() -> None:
    cfg = load_config(Path(__file__).parents[2] / "configs/slurm-bridge.yaml", env={})
    assert cfg.account_for("alice") is not None and cfg.account_for("alice").users == "alice"
    assert cfg.account_for("nobody-listed") is None
    assert cfg.account_for("vision-team").account == "vision"  # type: ignore[union-attr]


def test_cli_refuses_bad_config_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("poll_s: fast\n")
    cmd = [sys.executable, "-m", "smart_agent.cli.main", "slurm-bridge", "--config", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "poll_s" in done.stderr and str(path) in done.stderr
    path.write_text("poll_s: 1\n")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": ""})
    assert done.returncode == 2 and "enrol_tokens" in done.stderr
