"""Pool health on PostgreSQL: a connection is pinged before use only if it sat idle."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError

# A pooled connection idle this long is pinged before use; one in use moments ago is not (the
# writer takes one per batch, and a ping is a round trip each time). A connection that died
# meanwhile fails its statement, which drops the pool's connections, and the writer runs
# the batch again command by command on fresh ones.
PING_IDLE_S = 1.0


def ping_when_idle(
    engine: Engine, idle_s: float = PING_IDLE_S, clock: Callable[[], float] = time.monotonic
) -> None:
    """SQLAlchemy's pre-ping, but only for connections that sat in the pool `idle_s`."""

    def checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = clock()

    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is not None and clock() - since < idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool drops this connection and checks out another.
            raise DisconnectionError(str(exc)) from exc

    event.listen(engine, "checkin", checked_in)
    event.listen(engine, "checkout", checked_out)
