"""Write-behind of heartbeats: telemetry and the time a node was last heard from are
coalesced in memory and written in one writer command per flush, not one per heartbeat."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy import bindparam, update

from control_plane.db.models import NodeRow
from control_plane.services.writer import GroupWriter

log = logging.getLogger("jitgpu.heartbeats")

NODE = NodeRow.__table__
# Never move last_heartbeat_at backwards (another replica may have written a newer one).
FLUSH = (
    update(NODE)
    .where(NODE.c.id == bindparam("node"))
    .where((NODE.c.last_heartbeat_at.is_(None)) | (NODE.c.last_heartbeat_at < bindparam("at")))
    .values(last_heartbeat_at=bindparam("at"), telemetry_json=bindparam("telemetry"))
)


class HeartbeatBuffer:
    """The newest heartbeat of each node since the last flush (thread-safe)."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self.flushed = 0

    def put(self, node_id: str, at: float, telemetry: str) -> None:
        with self._lock:
            current = self._pending.get(node_id)
            if current is None or current[0] <= at:
                self._pending[node_id] = (at, telemetry)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self, writer: GroupWriter) -> int:
        """Write what is pending in one command of the writer (call it from a thread other than
        the event loop's); on failure keep it for the next flush."""
        with self._lock:
            batch, self._pending = self._pending, {}
        if not batch:
            return 0
        rows = [
            {"node": node, "at": at, "telemetry": telemetry}
            for node, (at, telemetry) in batch.items()
        ]
        try:
            writer.run_from_thread(lambda session: session.connection().execute(FLUSH, rows))
        except Exception:
            with self._lock:
                for node, item in batch.items():
                    if node not in self._pending:
                        self._pending[node] = item
            raise
        self.flushed += len(batch)
        return len(batch)


class Flusher:
    """Flushes a buffer every `interval_s` on a daemon thread, and once more on stop."""

    def __init__(
        self,
        buffer: HeartbeatBuffer,
        writer: GroupWriter,
        interval_s: float,
        on_flush: Callable[[], None] | None = None,
    ) -> None:
        self.buffer = buffer
        self.on_flush = on_flush  # told of every successful flush (the stall watch)
        self.writer = writer
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._flush()

    def _flush(self) -> None:
        try:
            self.buffer.flush(self.writer)
            if self.on_flush is not None:
                self.on_flush()
        except Exception:  # the database may be away; heartbeats wait for the next flush
            log.warning(
                "heartbeat flush failed; %d node(s) kept for the next one",
                len(self.buffer),
                exc_info=True,
            )
