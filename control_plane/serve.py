"""`jitgpu server`: run the control plane under uvicorn with the given settings."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

from control_plane import logs
from control_plane.config import ConfigError, load_settings


def run_server(*, config: Path | None, overrides: dict[str, Any]) -> int:
    import uvicorn

    from control_plane.api.app import create_app
    from control_plane.db.engine import DatabaseConfigError

    try:
        settings = load_settings(config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not settings.admin_token:
        # Without a configured token the admin routes would be unusable; make one and say so.
        settings.admin_token = secrets.token_urlsafe(24)
        print(
            f"admin token (set JITGPU_ADMIN_TOKEN to choose one): {settings.admin_token}",
            file=sys.stderr,
            flush=True,
        )
    if settings.database_url.startswith("sqlite:///"):
        # Say where the data is: a newcomer should never have to guess which file it was.
        print(f"database: {settings.database_url}", file=sys.stderr, flush=True)
    logs.configure(settings.log_level, settings.log_format)
    try:
        app = create_app(settings)
    except DatabaseConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return 0
