"""PostgreSQL reads on the event loop: a few autocommit async connections, one read each at a
time, so that a node's heartbeat needs no worker thread (as SQLite's loop reads need none)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sqlalchemy.engine import Dialect

from control_plane.db.session import as_sqlalchemy_error

# One snapshot for every statement of a read (a heartbeat reply's epoch and assignments agree).
SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


class LoopReader:
    """Up to `size` connections, opened as reads need them, on the loop it is bound to; a
    connection whose read failed is closed, not reused (its state is unknown), and a later
    read opens another. `close()` on the same loop before it ends."""

    def __init__(self, dialect: Dialect, connect: dict[str, Any], *, size: int = 4) -> None:
        self._dialect = dialect
        self._connect = connect
        self._size = size
        self._free: list[psycopg.AsyncConnection] = []
        self._opened = 0
        self._freed: asyncio.Condition | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop whose reads this serves (the server's, from its start)."""
        self._loop = loop
        self._freed = asyncio.Condition()

    def serves_here(self) -> bool:
        """Whether the running loop is the bound one (an app served without its lifespan
        runs requests on loops of their own: those read on worker threads instead)."""
        try:
            return not self._closed and self._loop is asyncio.get_running_loop()
        except RuntimeError:
            return False

    async def read_once(self, statements: list[tuple[str, Any]]) -> list[list[Any]]:
        """Prebuilt reads (`sql.prepared_all`) in one snapshot: BEGIN (repeatable read, read
        only), the reads and COMMIT in one round trip; each read's rows."""
        conn = await self._take()
        batch = [(SNAPSHOT_BEGIN, None), *statements, ("COMMIT", None)]
        try:
            cursors = [conn.cursor() for _ in batch]
            async with conn.pipeline():
                for cursor, (text, params) in zip(cursors, batch, strict=True):
                    await cursor.execute(text, params)
            rows = [await c.fetchall() if c.description is not None else [] for c in cursors]
        except psycopg.Error as exc:
            await self._drop(conn)
            raise as_sqlalchemy_error(self._dialect, batch[1][0], None, exc) from exc
        except BaseException:  # cancelled mid-read: the connection's state is unknown
            await self._drop(conn)
            raise
        await self._give_back(conn)
        return rows[1:-1]

    async def _take(self) -> psycopg.AsyncConnection:
        assert self._freed is not None, "bind() first"
        async with self._freed:
            while not self._free and self._opened >= self._size:
                await self._freed.wait()
            if self._free:
                return self._free.pop()
            self._opened += 1
        try:
            return await psycopg.AsyncConnection.connect(**self._connect, autocommit=True)
        except psycopg.Error as exc:
            await self._forget()
            raise as_sqlalchemy_error(self._dialect, "connect", None, exc) from exc
        except BaseException:
            await self._forget()
            raise

    async def _give_back(self, conn: psycopg.AsyncConnection) -> None:
        if self._closed:  # a read that outlived the server's stop
            await self._drop(conn)
            return
        assert self._freed is not None
        async with self._freed:
            self._free.append(conn)
            self._freed.notify()

    async def _drop(self, conn: psycopg.AsyncConnection) -> None:
        try:
            await conn.close()
        finally:
            await self._forget()

    async def _forget(self) -> None:
        assert self._freed is not None
        async with self._freed:
            self._opened -= 1
            self._freed.notify()

    async def close(self) -> None:
        self._closed = True
        free, self._free = self._free, []
        for conn in free:
            await conn.close()
