"""`jitgpu node`: load the settings, pick the GPU backend, run the agent until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

from control_plane.node_agent.agent import Agent
from control_plane.node_agent.client import ControlPlane
from control_plane.node_agent.config import ConfigError, load_config
from control_plane.node_agent.discover import default_node_name, open_backend
from control_plane.node_agent.identity import CredentialStore
from control_plane.node_agent.nvml import NvmlUnavailable
from control_plane.node_agent.procs import ChildRegistry

log = logging.getLogger("jitgpu.node")

EXIT_CONFIG = 2


def run_node(
    *,
    server: str | None = None,
    heartbeat_server: str | None = None,
    token: str | None = None,
    enrol_token: str | None = None,
    name: str | None = None,
    simulated_gpus: int | None = None,
    gpu_model: str | None = None,
    spine: str | None = None,
    leaf: str | None = None,
    config: Path | None = None,
) -> int:
    """Run the node agent in this process; returns the exit status (0 after SIGTERM)."""
    simulated: dict[str, Any] = {"count": simulated_gpus, "model": gpu_model}
    overrides: dict[str, Any] = {
        "server": server,
        "heartbeat_server": heartbeat_server,
        "token": token,
        "enrol_token": enrol_token,
        "name": name,
        "spine": spine,
        "leaf": leaf,
        "simulated": simulated,
        # --simulated-gpus forces the simulated backend, whatever the machine has.
        "backend": "simulated" if simulated_gpus is not None else None,
    }
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    node = cfg.name or default_node_name()
    store = CredentialStore.for_node(cfg.state_path, node)
    identity = cfg.token or cfg.enrol_token or store.path.exists()
    missing = [
        hint
        for value, hint in (
            (cfg.server, "the control-plane URL (--server, JITGPU_SERVER or server:)"),
            (
                identity,
                f"an enrolment token (JITGPU_ENROL_TOKEN or enrol_token:) or a stored "
                f"credential ({store.path})",
            ),
        )
        if not value
    ]
    if missing:
        print(f"error: the node agent needs {' and '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    assert cfg.server is not None
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per request would drown the agent's own events.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        backend = open_backend(cfg, node)
    except NvmlUnavailable as exc:
        print(f"error: backend is nvml but {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # Jobs of another user (tasks.user) can write cache_dir: the list of process groups that
    # the agent, as root, kills after a crash must not be theirs to edit.
    registry_dir = cfg.state_path if cfg.tasks.user else cfg.cache_path
    folders = [("cache_dir", cfg.cache_path, 0o777), ("state_dir", cfg.state_path, 0o700)]
    for key, folder, mode in folders[: 2 if cfg.tasks.user else 1]:
        try:
            folder.mkdir(mode=mode, parents=True, exist_ok=True)
        except OSError as exc:
            print(f"error: {key} {folder}: {exc.strerror}", file=sys.stderr)
            return EXIT_CONFIG
    # No token yet: the agent enrols (or loads its stored credential) before its first call.
    client = ControlPlane(
        cfg.server,
        cfg.token or "",
        timeout=cfg.request_timeout_s,
        heartbeats=cfg.heartbeat_server,
    )
    # The long poll's client shares the credential, whatever enrolment or rotation sets.
    watch = client.twin() if cfg.long_poll_s > 0 else None
    agent = Agent(
        cfg,
        backend,
        client,
        name=node,
        registry=ChildRegistry(registry_dir / f"children-{node}.json"),
        watch=watch,
        credentials=store,
    )
    log.info(
        "node agent %s starting: %d %s GPU(s) (%s backend), control plane %s, heartbeat every "
        "%gs%s",
        node,
        len(agent.discovery.gpus),
        ", ".join(sorted({g.model for g in agent.discovery.gpus})) or "no",
        backend.kind,
        cfg.server,
        cfg.heartbeat_interval_s,
        f" to {cfg.heartbeat_server}" if cfg.heartbeat_server else "",
    )

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s received: draining", signal.Signals(signum).name)
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return agent.run()
    finally:
        client.close()
        if watch is not None:
            watch.close()
