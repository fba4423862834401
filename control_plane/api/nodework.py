"""Wakes a node's long-poll when its assignments change: an in-process board of versions.

Write transactions name the nodes whose assignments they changed; after the commit the
database calls `NodeWorkBoard.publish` (from whatever thread committed), which bumps each
node's version on the event loop and wakes the requests waiting on it. A node passes the
version it last saw; a version other than the current one answers at once, so a change
between two polls is never missed. The board is per process: with several replicas, a change
made by another replica reaches the node at its next heartbeat or poll timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterable


class NodeWorkBoard:
    def __init__(self) -> None:
        # Versions differ from any earlier process's, so a node that polls a restarted
        # server with an old version is answered at once.
        self._boot = secrets.token_hex(4)
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def version(self, node_id: str) -> str:
        return f"{self._boot}.{self._counts.get(node_id, 0)}"

    def publish(self, node_ids: Iterable[str]) -> None:
        """Thread-safe: called after a commit that changed these nodes' assignments."""
        nodes = set(node_ids)
        loop = self._loop
        if not nodes or loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(self._bump, nodes)

    def _bump(self, nodes: set[str]) -> None:
        for node_id in nodes:
            self._counts[node_id] = self._counts.get(node_id, 0) + 1
            event = self._waiters.pop(node_id, None)
            if event is not None:
                event.set()

    def close(self) -> None:
        """Thread-safe: answer every long poll now and wait no more (the server stops).

        A graceful shutdown waits for requests in flight; a poll held for its full timeout
        would keep the old process up, and its nodes silent, for that long.
        """
        self._closing = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for event in self._waiters.values():
            event.set()
        self._waiters.clear()

    async def wait(self, node_id: str, since: str, timeout_s: float) -> None:
        """Return when the node's version is no longer `since`, or after `timeout_s`."""
        if self._closing or self.version(node_id) != since or timeout_s <= 0:
            return
        event = self._waiters.get(node_id)
        if event is None:
            event = self._waiters[node_id] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
