"""A short-lived cache of resolved API keys, so a request does not pay a lookup per call.

Revocation through this replica clears it at once; other replicas see it within `ttl_s`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from control_plane.services.auth import Principal


class KeyCache:
    def __init__(
        self, ttl_s: float = 5.0, size: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, Principal]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _slot(token: str) -> str:
        # Keep digests, not secrets, in memory.
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> Principal | None:
        if self.ttl_s <= 0:
            return None
        slot = self._slot(token)
        with self._lock:
            item = self._items.get(slot)
            if item is None:
                return None
            if self._clock() - item[0] > self.ttl_s:
                del self._items[slot]
                return None
            return item[1]

    def lookup(self, token: str) -> tuple[Principal, bool] | None:
        """The cached principal and whether it is fresh (within `ttl_s`), keeping stale ones.

        A caller may act on a stale entry only after checking the key again in the database
        (the hot heartbeat does, in the worker thread it needs anyway): so a revocation still
        takes effect within `ttl_s`, while a key used exactly once per `ttl_s` (a node's
        heartbeat) does not pay a second trip to the thread pool for its lookup.
        """
        if self.ttl_s <= 0:
            return None
        with self._lock:
            item = self._items.get(self._slot(token))
        if item is None:
            return None
        return item[1], self._clock() - item[0] <= self.ttl_s

    def forget(self, token: str) -> None:
        with self._lock:
            self._items.pop(self._slot(token), None)

    def put(self, token: str, principal: Principal) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            self._items[self._slot(token)] = (self._clock(), principal)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
