"""Choose the GPU backend (NVML, else simulated) and print what it discovers as JSON.

python -m control_plane.node_agent.discover [--config FILE] [--simulated-gpus N] [--samples 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import socket
import sys
import time
from typing import Any

from control_plane.node_agent.config import AgentConfig, ConfigError, load_config
from control_plane.node_agent.gpus import GpuBackend
from control_plane.node_agent.nvml import NvmlBackend, NvmlUnavailable
from control_plane.node_agent.simulated import SimulatedBackend

log = logging.getLogger("jitgpu.node")


def simulated(cfg: AgentConfig, node: str) -> SimulatedBackend:
    sim = cfg.simulated
    return SimulatedBackend(
        node=node,
        count=sim.count,
        model=sim.model,
        memory_mb=sim.memory_mb,
        faults_file=sim.faults_file.expanduser() if sim.faults_file else None,
    )


def open_backend(cfg: AgentConfig, node: str, *, nvml_module: Any = None) -> GpuBackend:
    """`simulated` as asked; `nvml` or fail; `auto`: NVML, or simulated GPUs without a driver."""
    if cfg.backend == "simulated":
        return simulated(cfg, node)
    backend = NvmlBackend(nvml_module, model_aliases=cfg.model_aliases)
    try:
        backend.discover()
    except NvmlUnavailable as exc:
        if cfg.backend == "nvml":
            raise
        log.warning(
            "no NVIDIA driver (%s): presenting %d simulated %s GPU(s)",
            exc,
            cfg.simulated.count,
            cfg.simulated.model,
        )
        return simulated(cfg, node)
    return backend


def default_node_name() -> str:
    """The host name, cut to what a node name may contain."""
    raw = socket.gethostname().split(".")[0] or "node"
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in raw).lstrip("._-")
    return (cleaned or "node")[:64]


def report(backend: GpuBackend, *, samples: int = 1, interval_s: float = 1.0) -> dict[str, Any]:
    found = backend.discover()
    readings = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        readings.append([s.as_dict() for s in backend.sample()])
    return {
        "host": platform.node(),
        "backend": found.backend,
        "driver": found.driver,
        "gpus": [g.as_dict() for g in found.gpus],
        "samples": readings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="node-agent YAML (configs/node-agent.yaml)")
    parser.add_argument("--simulated-gpus", type=int, help="force N simulated GPUs")
    parser.add_argument("--samples", type=int, default=1, help="telemetry readings to take")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.simulated_gpus is not None:
        overrides = {"backend": "simulated", "simulated": {"count": args.simulated_gpus}}
    try:
        cfg = load_config(args.config, overrides)
        backend = open_backend(cfg, cfg.name or default_node_name())
    except (ConfigError, NvmlUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        out = report(backend, samples=max(1, args.samples), interval_s=args.interval)
    finally:
        backend.close()
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
