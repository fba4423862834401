"""The real app under uvicorn in a thread on 127.0.0.1, sharing the test's clock and database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import uvicorn

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from tests.support.pg import free_port


class LiveServer:
    """Real HTTP on loopback, in-process so that tests can pass the server a clock."""

    def __init__(
        self, db: Database, settings: ServerSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(settings, db=db, clock=clock, key_cache_ttl_s=0)
        # The server's writer: periodic jobs a test runs by hand take their turn through it.
        self.writer = app.state.writer
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the live server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
