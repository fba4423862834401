"""Python client for the jitgpu REST API, sync (`Client`) and async (`AsyncClient`).

Creating calls carry an Idempotency-Key (one is made per call when none is given), so the
client may retry them after a lost answer without ever allocating twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.enums import HoldStatus
from smart_agent.client_calls import ApiCalls, Call

T = TypeVar("T")

DEFAULT_SERVER = "http://127.0.0.1:8080"
RETRY_STATUSES = frozenset({502, 503, 504})
READY_OR_DONE = {s.value for s in HoldStatus} - {"requested", "placed", "warming"}


class JitgpuError(Exception):
    """The server refused or failed a call; `code` and `field` come from its JSON error body."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class ConnectionFailed(JitgpuError):
    def __init__(self, message: str):
        super().__init__(0, "connection_failed", message)


@dataclass
class RetryPolicy:
    attempts: int = 4
    base_s: float = 0.2
    max_s: float = 5.0
    jitter: Callable[[], float] = field(default=random.random)

    def delay(self, attempt: int) -> float:
        # Exponential backoff with full jitter keeps many agents from retrying in step.
        return min(self.max_s, self.base_s * 2**attempt) * (0.5 + self.jitter() / 2)


def _settings(server: str | None, token: str | None) -> tuple[str, str | None]:
    server = server or os.environ.get("JITGPU_SERVER") or DEFAULT_SERVER
    token = token or os.environ.get("JITGPU_TOKEN")
    return server.rstrip("/"), token


def _error(response: httpx.Response) -> JitgpuError:
    try:
        detail = response.json()["error"]
        return JitgpuError(
            response.status_code,
            detail.get("code", "error"),
            detail.get("message", ""),
            detail.get("field"),
        )
    except (ValueError, KeyError, TypeError):
        return JitgpuError(response.status_code, "http_error", response.text[:200])


def _prepare(call: Call) -> tuple[dict[str, str], Any]:
    headers = {}
    if call.idempotent_post:
        headers["Idempotency-Key"] = call.idempotency_key or uuid.uuid4().hex
    return headers, call.body


def _attempts(call: Call, retry: RetryPolicy) -> int:
    return 1 if call.secret else retry.attempts


def _settle(call: Call, response: httpx.Response) -> tuple[bool, Any]:
    """(True, value) for an answer, (False, error) for one worth retrying; raises the rest."""
    if response.status_code in RETRY_STATUSES:
        return False, _error(response)
    if response.is_error:
        raise _error(response)
    return True, call.parse(response.json())


def _give_up(server: str, last: Exception | None) -> JitgpuError:
    if isinstance(last, JitgpuError):
        return last
    return ConnectionFailed(f"cannot reach {server}: {last}")


class Client(ApiCalls):
    """Blocking client. `Client(server, token)`; both default to JITGPU_SERVER/JITGPU_TOKEN."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server, token = _settings(server, token)
        self.retry = retry or RetryPolicy()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> Any:
        headers, body = _prepare(call)
        last: Exception | None = None
        for attempt in range(_attempts(call, self.retry)):
            if attempt:
                time.sleep(self.retry.delay(attempt - 1))
            try:
                response = self._http.request(
                    call.method, call.path, json=body, params=call.params, headers=headers
                )
            except httpx.TransportError as exc:
                last = exc
                continue
            done, last = _settle(call, response)
            if done:
                return last
        raise _give_up(self.server, last)

    def wait_until_ready(
        self, hold_id: str, *, timeout_s: float = 300.0, poll_s: float = 0.5
    ) -> Hold:
        """Poll a hold until it is ready (or has ended); TimeoutError after timeout_s."""
        return self._poll(
            lambda: self.get_hold(hold_id), _hold_settled, f"hold {hold_id}", timeout_s, poll_s
        )

    def wait_until_allocated(
        self, allocation_id: str, *, timeout_s: float = 300.0, poll_s: float = 0.5
    ) -> Allocation:
        """Poll an allocation until it is no longer pending; TimeoutError after timeout_s."""
        return self._poll(
            lambda: self.get_allocation(allocation_id),
            _allocation_settled,
            f"allocation {allocation_id}",
            timeout_s,
            poll_s,
        )

    @staticmethod
    def _poll(
        fetch: Callable[[], T],
        done: Callable[[T], bool],
        what: str,
        timeout_s: float,
        poll_s: float,
    ) -> T:
        deadline = time.monotonic() + timeout_s
        while True:
            item = fetch()
            if done(item):
                return item
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} still {item.status} after {timeout_s}s")  # type: ignore[attr-defined]
            time.sleep(poll_s)


class AsyncClient(ApiCalls):
    """The same calls as `Client`, awaitable."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server, token = _settings(server, token)
        self.retry = retry or RetryPolicy()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call) -> Any:  # type: ignore[override]
        headers, body = _prepare(call)
        last: Exception | None = None
        for attempt in range(_attempts(call, self.retry)):
            if attempt:
                await asyncio.sleep(self.retry.delay(attempt - 1))
            try:
                response = await self._http.request(
                    call.method, call.path, json=body, params=call.params, headers=headers
                )
            except httpx.TransportError as exc:
                last = exc
                continue
            done, last = _settle(call, response)
            if done:
                return last
        raise _give_up(self.server, last)

    async def wait_until_ready(
        self, hold_id: str, *, timeout_s: float = 300.0, poll_s: float = 0.5
    ) -> Hold:
        """Poll a hold until it is ready (or has ended); TimeoutError after timeout_s."""
        return await self._poll(
            lambda: self.get_hold(hold_id), _hold_settled, f"hold {hold_id}", timeout_s, poll_s
        )

    async def wait_until_allocated(
        self, allocation_id: str, *, timeout_s: float = 300.0, poll_s: float = 0.5
    ) -> Allocation:
        """Poll an allocation until it is no longer pending; TimeoutError after timeout_s."""
        return await self._poll(
            lambda: self.get_allocation(allocation_id),
            _allocation_settled,
            f"allocation {allocation_id}",
            timeout_s,
            poll_s,
        )

    @staticmethod
    async def _poll(
        fetch: Callable[[], Awaitable[T]],
        done: Callable[[T], bool],
        what: str,
        timeout_s: float,
        poll_s: float,
    ) -> T:
        deadline = time.monotonic() + timeout_s
        while True:
            item = await fetch()
            if done(item):
                return item
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} still {item.status} after {timeout_s}s")  # type: ignore[attr-defined]
            await asyncio.sleep(poll_s)


def _hold_settled(hold: Hold) -> bool:
    return hold.status in READY_OR_DONE


def _allocation_settled(alloc: Allocation) -> bool:
    return alloc.status != "pending"
