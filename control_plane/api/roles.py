"""A server's role: `all` serves every route; `heartbeats` serves only nodes' heartbeats.

A heartbeats-role server shares the main server's database and takes the nodes' heartbeats
(their telemetry, validation, reads and write-behind) off the main server's core: at 1,250
nodes they cost the main server's allocations about 15% of their rate (BENCHMARKS.md). It runs
no periodic jobs and answers anything else with 421, so a client pointed at it by mistake is
told where to go instead of being served half an API.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.errors import error_response

ROLES = ("all", "heartbeats")

# What a heartbeats-role server answers: the heartbeat itself, and what probes and scrapers ask.
_SERVED = (
    ("POST", re.compile(r"/v1/nodes/[^/]+/heartbeat")),
    ("GET", re.compile(r"/healthz|/readyz|/metrics")),
)


def serves(role: str, method: str, path: str) -> bool:
    """Whether a server of this role answers the request itself."""
    if role == "all":
        return True
    return any(method == m and pattern.fullmatch(path) for m, pattern in _SERVED)


class RoleGate:
    """Answers 421 (misdirected) to what a heartbeats-role server does not serve."""

    def __init__(self, app: ASGIApp, *, role: str) -> None:
        self.app = app
        self.role = role

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or serves(self.role, scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = error_response(
            421,
            "misdirected",
            f"this server has the role {self.role!r}: it takes node heartbeats only "
            "(POST /v1/nodes/{id}/heartbeat); send other requests to the main server",
        )
        await refusal(scope, receive, send)
