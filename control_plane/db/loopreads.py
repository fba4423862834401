"""PostgreSQL reads on the event loop: a few autocommit async connections, one read each at a
time, so that a node's heartbeat needs no worker thread (as SQLite's loop reads need none)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from sqlalchemy import ColumnElement, Select, func, literal_column, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Dialect

from control_plane.db.session import as_sqlalchemy_error

# PostgreSQL chose to plan the folded heartbeat read again at every run (0.66 ms of its CPU,
# for 0.1 ms of execution): its reads are lookups by node, which one plan serves for every
# node (tests/control_plane/test_generic_plans.py checks that plan reads through indexes).
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"

# A read and the column its rows come in order of (None: any order).
Read = tuple[Select[Any], ColumnElement[Any] | None]


def folded(reads: Sequence[Read]) -> Select[Any]:
    """Reads folded into one SELECT, one column per read with its rows as a JSON array: one
    statement sees one snapshot (a heartbeat reply's epoch and assignments agree) without a
    BEGIN and a COMMIT, and costs one execution instead of one per read."""
    columns = []
    for n, (read, order) in enumerate(reads):
        if order is not None:
            read = read.add_columns(order.label("_order"))
        rows = read.subquery(f"read{n}")
        values = func.json_build_array(*(c for c in rows.c if c.key != "_order"))
        agg = func.json_agg(values if order is None else aggregate_order_by(values, rows.c._order))
        found = select(agg).scalar_subquery()
        columns.append(func.coalesce(found, literal_column("'[]'::json")).label(f"read{n}"))
    return select(*columns)


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
        # The folded statements' SQL text and constant parameters, by their reads.
        self._statements: dict[tuple[Read, ...], tuple[str, dict[str, Any]]] = {}

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

    async def read_once(
        self, reads: Sequence[Read], params: Mapping[str, Any]
    ) -> list[list[tuple[Any, ...]]]:
        """The reads (`folded`) in one statement, one round trip and one snapshot: each
        read's rows. `params` holds every read's parameters (one value per name)."""
        text, values = self._compiled(reads, params)
        conn = await self._take()
        try:
            cursor = conn.cursor()
            await cursor.execute(text, values)
            row = await cursor.fetchone()
        except psycopg.Error as exc:
            await self._drop(conn)
            raise as_sqlalchemy_error(self._dialect, text, None, exc) from exc
        except BaseException:  # cancelled mid-read: the connection's state is unknown
            await self._drop(conn)
            raise
        await self._give_back(conn)
        assert row is not None  # a SELECT without FROM has one row
        return [[tuple(r) for r in read] for read in row]

    def _compiled(
        self, reads: Sequence[Read], params: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        key = tuple(reads)
        found = self._statements.get(key)
        if found is None:
            compiled = folded(reads).compile(dialect=self._dialect)
            literals = {k: v for k, v in compiled.params.items() if v is not None}
            found = self._statements[key] = (compiled.string, literals)
        text, literals = found
        return text, {**literals, **params}

    async def _take(self) -> psycopg.AsyncConnection:
        assert self._freed is not None, "bind() first"
        async with self._freed:
            while not self._free and self._opened >= self._size:
                await self._freed.wait()
            if self._free:
                return self._free.pop()
            self._opened += 1
        try:
            conn = await psycopg.AsyncConnection.connect(**self._connect, autocommit=True)
            try:
                await conn.execute(GENERIC_PLANS)
            except BaseException:
                await conn.close()
                raise
            return conn
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
