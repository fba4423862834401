"""The control plane as the node agent sees it: its REST calls, typed errors, and backoff."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.node_identity import NodeCredential, NodeEnrol
from control_plane.schemas.nodes import (
    Heartbeat,
    HeartbeatReply,
    Node,
    NodeRegister,
    TaskReport,
    WarmupReport,
)

M = TypeVar("M", bound=BaseModel)


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
    """Blocking client; `http` may be any httpx.Client (tests pass the app's TestClient)."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout: float = 10.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.http = http or httpx.Client(base_url=self.server, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def set_token(self, token: str) -> None:
        self._headers = {"Authorization": f"Bearer {token}"}

    def enrol(self, name: str, token: str) -> NodeCredential:
        """Trade an enrolment token (or the admin token) for this node's own credential."""
        headers = {"Authorization": f"Bearer {token}"}
        return self._post("/v1/nodes/enrol", NodeEnrol(name=name), NodeCredential, headers)

    def rotate(self, node_id: str) -> NodeCredential:
        """A new credential for this node; the one in use stops working once this returns."""
        return self._post(f"/v1/nodes/{node_id}/credentials", None, NodeCredential)

    def register(self, body: NodeRegister) -> Node:
        return self._post("/v1/nodes", body, Node)

    def heartbeat(self, node_id: str, body: Heartbeat) -> HeartbeatReply:
        return self._post(f"/v1/nodes/{node_id}/heartbeat", body, HeartbeatReply)

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

    def _post(
        self,
        path: str,
        body: BaseModel | None,
        parse: type[M],
        headers: dict[str, str] | None = None,
    ) -> M:
        payload = None if body is None else body.model_dump(mode="json", exclude_none=True)
        try:
            r = self.http.post(path, json=payload, headers=headers or self._headers)
        except httpx.TransportError as exc:
            detail = f"{exc.__class__.__name__}: {exc}" if str(exc) else repr(exc)
            raise Unreachable(detail) from exc
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
