"""`jitgpu slurm-bridge`: the loop around Bridge.step, with backoff when a side is away."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from control_plane.node_agent.client import ApiError, Backoff, Refused
from control_plane.slurm_bridge.bridge import Bridge, BridgeClient
from control_plane.slurm_bridge.config import BridgeConfig, ConfigError, load_config
from control_plane.slurm_bridge.slurm import Slurm, SlurmError

log = logging.getLogger("jitgpu.slurm_bridge")

EXIT_OK, EXIT_CONFIG, EXIT_REFUSED = 0, 2, 3


def build(cfg: BridgeConfig) -> Bridge:
    env = None
    if cfg.slurm_conf is not None:
        env = {**os.environ, "SLURM_CONF": str(cfg.slurm_conf)}
    # This client only enrols; each node then acts with its own credential.
    return Bridge(cfg, Slurm(env=env), BridgeClient(cfg.server, cfg.token or ""))


def run_bridge(cfg: BridgeConfig, *, stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if threading.current_thread() is threading.main_thread():
            signal.signal(sig, lambda *_: stop.set())
    bridge = build(cfg)
    backoff = Backoff(initial_s=cfg.poll_s, max_s=60.0)
    adopted = False
    while not stop.is_set():
        try:
            if not adopted:
                names = bridge.adopt()
                log.info("adopted %d reservation(s): %s", len(names), ", ".join(names) or "-")
                adopted = True
            bridge.step(time.time())
            backoff.reset()
            delay = cfg.poll_s
        except Refused as exc:
            log.error("the control plane refused the bridge: %s", exc)
            return EXIT_REFUSED
        except (ApiError, SlurmError) as exc:
            delay = backoff.next()
            log.warning("step failed (%s); next try in %.1fs", exc, delay)
        stop.wait(delay)
    bridge.client.close()
    return EXIT_OK


def main(config: Path | None, server: str | None, token: str | None) -> int:
    """Entry of `jitgpu slurm-bridge`: settings, logging, the loop."""
    try:
        cfg = load_config(config, {"server": server, "token": token})
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not (cfg.token or cfg.enrol_tokens or cfg.credentials_dir):
        print("error: the bridge needs enrol_tokens (one per Slurm node), a credentials_dir "
              "of enrolled nodes, or a token to enrol with (--token, JITGPU_NODE_TOKEN)",
              file=sys.stderr)  # fmt: skip
        return EXIT_CONFIG
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return run_bridge(cfg)
