"""`jitgpu server`: run the control plane under uvicorn with the given settings."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from control_plane import heartbeat_child, logs, secrets_file
from control_plane.config import ConfigError, load_settings


def run_server(*, config: Path | None, overrides: dict[str, Any]) -> int:
    import uvicorn

    from control_plane.api import transport
    from control_plane.api.app import create_app
    from control_plane.db.engine import DatabaseConfigError

    try:
        settings = load_settings(config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Everything the server creates (the SQLite file and its WAL, the token file) is the
    # operator's alone: the database holds key hashes and every tenant's commands.
    os.umask(0o077)
    # The writer thread and the event loop hand the GIL to each other for every command; at
    # the default 5 ms a waiting thread may sit idle for most of a batch (measured: about 10%
    # more allocations/s at 0.5 ms, BENCHMARKS.md).
    sys.setswitchinterval(0.0005)
    if not settings.admin_token:
        # Without a configured token the admin routes would be unusable: make one (or reuse
        # the one made before) in a file only the operator can read. Never printed or logged.
        path, settings.admin_token = secrets_file.admin_token(settings.database_url)
        print(
            f"admin token in {path} (set JITGPU_ADMIN_TOKEN to choose one)",
            file=sys.stderr,
            flush=True,
        )
    if settings.database_url.startswith("sqlite:///"):
        # Say where the data is: a newcomer should never have to guess which file it was.
        print(f"database: {settings.database_url}", file=sys.stderr, flush=True)
    if settings.role == "heartbeats":
        heartbeat_child.follow_parent()
        print(
            "role heartbeats: this server takes node heartbeats only (421 for anything else); "
            "the main server on the same database runs the rest and the periodic jobs",
            file=sys.stderr,
            flush=True,
        )
    logs.configure(settings.log_level, settings.log_format)
    try:
        app = create_app(settings)
    except DatabaseConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    served = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        # httptools with a guard: request heads are bounded in size, count and time.
        http=transport.protocol_for(transport.limits_of(settings)),
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    board = app.state.node_work

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Nodes' long polls end at once, so that the graceful stop does not wait on them.
            board.close()
            super().handle_exit(sig, frame)

    child = None
    if settings.heartbeat_port is not None:
        child = heartbeat_child.HeartbeatChild(settings, config)
        print(
            f"heartbeats-role server on port {settings.heartbeat_port} "
            f"(pid {child.process.pid}); node agents learn of it when they register",
            file=sys.stderr,
            flush=True,
        )
    # Everything made so far (modules, the app, its routes and models) lives as long as the
    # process: moved out of the collector's sight, a full collection no longer walks it, which
    # stalled every request in flight (the p99 of allocate+release fell from ~140 ms to ~45-70
    # ms, BENCHMARKS.md).
    gc.freeze()
    try:
        Server(served).run()
    finally:
        if child is not None:
            child.stop()
    return 0
