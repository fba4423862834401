"""The control plane as the node agent sees it: its REST calls, typed errors, and backoff."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel

from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.node_identity import NodeCredential, NodeEnrol
from control_plane.schemas.nodes import (
    Heartbeat,
    HeartbeatReply,
    Node,
    NodeRegister,
    NodeWork,
    TaskReport,
    WarmupReport,
)

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger("jitgpu.node")

# After the heartbeat server fails, heartbeats go to the main server this long before the
# heartbeat server is tried again: a host that does not answer would otherwise cost every
# beat a whole request timeout, late enough for the control plane to count the node dead.
HEARTBEAT_FALLBACK_S = 60.0


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Unreachable(ApiError):
    """Transient: no connection, a timeout, a 5xx or 429. Retry with backoff."""


class Refused(ApiError):
    """The token is not accepted (401/403): retrying will not help."""


class NotFound(ApiError):
    """404: the node (on a heartbeat) or the hold/allocation (on a report) is unknown."""


class Rejected(ApiError):
    """Another 4xx: the server refused this body; it is not worth sending again."""


class ControlPlane:
    """Blocking client; `http` may be any httpx.Client (tests pass the app's TestClient).

    With `heartbeats`, the URL of a heartbeats-role server on the same database, heartbeats go
    there and everything else to `server`; when it fails (no answer, 5xx, 429) that heartbeat
    and those of the next HEARTBEAT_FALLBACK_S go to `server`, so the node stays alive."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout: float = 10.0,
        http: httpx.Client | None = None,
        heartbeats: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout
        self.http = http or httpx.Client(base_url=self.server, timeout=timeout)
        self.heartbeats = heartbeats.rstrip("/") if heartbeats else None
        self._beats = (
            httpx.Client(base_url=self.heartbeats, timeout=timeout) if self.heartbeats else None
        )
        self._clock = clock
        self._beats_back_at = 0.0  # when the heartbeat server is tried again after a failure

    def close(self) -> None:
        self.http.close()
        if self._beats is not None:
            self._beats.close()

    def set_token(self, token: str) -> None:
        # In place: a twin shares this dict, so that its long poll follows a rotation.
        self._headers["Authorization"] = f"Bearer {token}"

    def twin(self) -> ControlPlane:
        """Another client to the same server with its own connections (for the long poll,
        which runs in its own thread while the main loop heartbeats); it uses the same
        credential, whatever this client is given later (enrolment, rotation)."""
        other = ControlPlane(self.server, "", timeout=self._timeout)
        other._headers = self._headers
        return other

    def enrol(self, name: str, token: str) -> NodeCredential:
        """Trade an enrolment token (or the admin token) for this node's own credential."""
        headers = {"Authorization": f"Bearer {token}"}
        return self._post("/v1/nodes/enrol", NodeEnrol(name=name), NodeCredential, headers)

    def rotate(self, node_id: str) -> NodeCredential:
        """A new credential for this node; the one in use stops working once this returns."""
        return self._post(f"/v1/nodes/{node_id}/credentials", None, NodeCredential)

    def register(self, body: NodeRegister) -> Node:
        return self._post("/v1/nodes", body, Node)

    def beat_to_port(self, port: int) -> None:
        """Send heartbeats to `port` on the main server's host (a heartbeats-role process the
        server named when this node registered), with the same fallback to the server."""
        parts = urlsplit(self.server)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address goes back in brackets
            host = f"[{host}]"
        url = urlunsplit((parts.scheme, f"{host}:{port}", parts.path, "", ""))
        if self._beats is not None:
            self._beats.close()
        self.heartbeats = url.rstrip("/")
        self._beats = httpx.Client(base_url=self.heartbeats, timeout=self._timeout)
        self._beats_back_at = 0.0

    def heartbeat(self, node_id: str, body: Heartbeat) -> HeartbeatReply:
        path = f"/v1/nodes/{node_id}/heartbeat"
        if self._beats is not None and self._clock() >= self._beats_back_at:
            try:
                return self._post(path, body, HeartbeatReply, http=self._beats)
            except Unreachable as exc:
                self._beats_back_at = self._clock() + HEARTBEAT_FALLBACK_S
                log.warning(
                    "heartbeat server %s failed (%s): heartbeats go to %s for %.0fs",
                    self.heartbeats,
                    exc,
                    self.server,
                    HEARTBEAT_FALLBACK_S,
                )
        return self._post(path, body, HeartbeatReply)

    def report_warmup(self, node_id: str, hold_id: str, body: WarmupReport) -> Hold:
        return self._post(f"/v1/nodes/{node_id}/holds/{hold_id}/warmup", body, Hold)

    def report_allocation_warmup(
        self, node_id: str, allocation_id: str, body: WarmupReport
    ) -> Allocation:
        """The cold start of a reactive allocation (one created with a warm-up) ended."""
        path = f"/v1/nodes/{node_id}/allocations/{allocation_id}/warmup"
        return self._post(path, body, Allocation)

    def report_task(self, node_id: str, allocation_id: str, body: TaskReport) -> Allocation:
        return self._post(f"/v1/nodes/{node_id}/allocations/{allocation_id}/task", body, Allocation)

    def work(self, node_id: str, *, since: str | None = None, wait_s: float = 0.0) -> NodeWork:
        """The node's desired state; with `since`, once it changed (or after `wait_s`)."""
        params: dict[str, str | float] = {"wait": wait_s}
        if since is not None:
            params["since"] = since
        # The server holds the answer up to wait_s: the read timeout must outlast it.
        extra = {"timeout": (self.http.timeout.read or 10.0) + wait_s} if wait_s > 0 else {}
        try:
            r = self.http.get(
                f"/v1/nodes/{node_id}/work", params=params, headers=self._headers, **extra
            )
        except httpx.TransportError as exc:
            raise Unreachable(_transport(exc)) from exc
        return _parse(r, NodeWork)

    def _post(
        self,
        path: str,
        body: BaseModel | None,
        parse: type[M],
        headers: dict[str, str] | None = None,
        *,
        http: httpx.Client | None = None,
    ) -> M:
        payload = None if body is None else body.model_dump(mode="json", exclude_none=True)
        try:
            r = (http or self.http).post(path, json=payload, headers=headers or self._headers)
        except httpx.TransportError as exc:
            raise Unreachable(_transport(exc)) from exc
        return _parse(r, parse)


def _transport(exc: httpx.TransportError) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else repr(exc)


def _parse(r: httpx.Response, parse: type[M]) -> M:
    code = _code(r) if r.status_code >= 400 else None
    if r.status_code >= 500 or r.status_code == 429:
        raise Unreachable(f"HTTP {r.status_code}: {_message(r)}", r.status_code, code)
    if r.status_code in (401, 403):
        raise Refused(f"HTTP {r.status_code}: {_message(r)}", r.status_code, code)
    if r.status_code == 404:
        raise NotFound(_message(r), 404, code)
    if r.status_code >= 400:
        raise Rejected(f"HTTP {r.status_code}: {_message(r)}", r.status_code, code)
    return parse.model_validate(r.json())


def _code(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _message(r: httpx.Response) -> str:
    try:
        data: Any = r.json()
        return str(data["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return r.text[:200] or r.reason_phrase


class Backoff:
    """Exponential delays with jitter: attempt n waits a random part of initial * mult**n, capped.

    The jitter (between half and all of the step) keeps a fleet of agents from reconnecting
    to a restarted control plane in lockstep.
    """

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        multiplier: float = 2.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.rng = rng
        self.failures = 0

    def next(self) -> float:
        # The exponent is capped so that a long outage cannot overflow the float.
        step = min(self.max_s, self.initial_s * self.multiplier ** min(self.failures, 60))
        self.failures += 1
        return step * (0.5 + 0.5 * self.rng())

    def reset(self) -> None:
        self.failures = 0
