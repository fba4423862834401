"""Small helpers for the node-agent tests: clocks, liveness of a pid, a config in tmp_path."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from control_plane.node_agent.config import AgentConfig, load_config


class Ticks:
    """A clock that answers the given readings, then keeps answering the last one."""

    def __init__(self, readings: Iterable[float]) -> None:
        self.readings = list(readings)
        self.calls = 0

    def __call__(self) -> float:
        value = self.readings[min(self.calls, len(self.readings) - 1)]
        self.calls += 1
        return value


def gone(pid: int) -> bool:
    """True once the process is dead (a zombie waiting for its parent counts as dead)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


def make_config(tmp_path: Path, **values: Any) -> AgentConfig:
    base: dict[str, Any] = {
        "cache_dir": str(tmp_path / "cache"),
        "heartbeat_interval_s": 0.5,
        "backend": "simulated",
        "simulated": {"count": 2, "model": "A100"},
    }
    base.update(values)
    return load_config(overrides=base, env={})


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("JITGPU_")}
